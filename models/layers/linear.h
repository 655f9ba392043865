// Linear (fully connected) layer: y[N, O] = x[N, I] * weight[O, I]^T + bias[O].
// Legend: N = batch, I = in_features, O = out_features.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/layers/layer.h"

namespace aiacc::models {

class Linear : public Layer {
 public:
  // Parameters "<name>.weight" [O, I] and, with `bias`, "<name>.bias" [O] (no weight decay),
  // both drawn uniformly from [-1/sqrt(I), 1/sqrt(I)] (PyTorch's default), deterministically
  // from `seed`. `dtype` is f32 or f64; inputs must then have the same dtype. Runs where its
  // parameters are (Parameter::to): on another device than the CPU, f32 through DeviceOps.
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias,
         std::uint64_t seed, DType dtype = DType::f32);

  // input [N, I] -> [N, O]. Throws InternalError naming the layer on a shape or dtype mismatch.
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output [N, O] -> dL/dinput [N, I]. Overwrites weight (then bias) grads and fires
  // their grad_ready() once each.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::vector<Parameter*> parameters() override;
  std::string name() const override { return name_; }

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_.get(); }  // null without bias

 private:
  template <class T>
  Tensor forward_typed(const Tensor& input);
  template <class T>
  Tensor backward_typed(const Tensor& grad_output, bool need_input_grad);
  Tensor backward_on_device(const Tensor& grad_output, bool need_input_grad);  // f32

  std::string name_;
  std::int64_t in_features_;
  std::int64_t out_features_;
  std::unique_ptr<Parameter> weight_;
  std::unique_ptr<Parameter> bias_;
  Tensor input_;  // the last forward's input, for backward
};

}  // namespace aiacc::models
