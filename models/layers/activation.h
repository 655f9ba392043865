// Activation layers over core/kernels/activation. ReLU: y = max(x, 0), gradient 0 at x == 0
// (like PyTorch). No parameters; f32 and f64 inputs of any shape.
#pragma once

#include <string>

#include "models/layers/layer.h"

namespace aiacc::models {

class ReLU : public Layer {
 public:
  explicit ReLU(std::string name) : name_(std::move(name)) {}
  // Returns a new tensor of the input's shape (the input is left untouched).
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output has the forward output's shape.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }
  // Sequential::to on a device fuses this ReLU into the BatchNorm before it: it then passes
  // tensors through unchanged in both directions.
  void set_passthrough(bool passthrough) { passthrough_ = passthrough; }

 private:
  std::string name_;
  bool passthrough_ = false;
  Tensor output_;  // the last forward's output: its sign is all backward needs
};

}  // namespace aiacc::models
