// A chain of layers run in order, differentiated in reverse order. Itself a Layer, so blocks
// (e.g. a residual block's main path) compose.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/layers/layer.h"

namespace aiacc::models {

class Sequential : public Layer {
 public:
  explicit Sequential(std::string name) : name_(std::move(name)) {}

  // Appends `layer` and returns a non-owning pointer to it (typed, for callers that configure it).
  template <class L>
  L* add(std::unique_ptr<L> layer) {
    L* raw = layer.get();
    layers_.push_back(std::move(layer));
    return raw;
  }

  Tensor forward(const Tensor& input, bool training) override;
  // Runs every layer's backward in reverse; the first layer gets need_input_grad as given.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::vector<Parameter*> parameters() override;
  std::vector<std::pair<std::string, Tensor>> buffers() override;
  // Also fuses each BatchNorm + ReLU pair on a device (the batch norm applies the ReLU, which
  // then passes through), and undoes that on the CPU.
  void to(Device device, const ActivationFormat& format = {}) override;
  std::string name() const override { return name_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace aiacc::models
