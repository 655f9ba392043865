// 2-D convolution layer (NCHW, square kernel, stride, zero padding, no groups), over
// core/kernels/conv2d.
// Legend: N = batch, C = in_channels, O = out_channels, H x W input, OH x OW output, K = kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/kernels/conv2d.h"
#include "models/layers/layer.h"

namespace aiacc::models {

class Conv2d : public Layer {
 public:
  // Parameters "<name>.weight" [O, C, K, K] and, with `bias`, "<name>.bias" [O] (no weight
  // decay), uniform in [-1/sqrt(C*K*K), 1/sqrt(C*K*K)] (PyTorch's default), deterministic in
  // `seed`. `dtype` is f32 or f64; inputs must then have the same dtype.
  Conv2d(std::string name, std::int64_t in_channels, std::int64_t out_channels, int kernel,
         int stride, int padding, bool bias, std::uint64_t seed, DType dtype = DType::f32);

  // input [N, C, H, W] -> [N, O, OH, OW] with OH = (H + 2*padding - K) / stride + 1 (floor).
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output [N, O, OH, OW] -> dL/dinput [N, C, H, W]. Overwrites weight (then bias) grads
  // and fires their grad_ready() once each.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::vector<Parameter*> parameters() override;
  std::string name() const override { return name_; }
  void to(Device device, const ActivationFormat& format = {}) override {
    format_ = format;
    Layer::to(device, format);
  }

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_.get(); }  // null without bias

 private:
  kernels::Conv2dGeometry geometry_for(const Shape& input_shape) const;
  template <class T>
  Tensor forward_typed(const Tensor& input, const kernels::Conv2dGeometry& g);
  template <class T>
  Tensor backward_typed(const Tensor& grad_output, bool need_input_grad);

  std::string name_;
  kernels::Conv2dGeometry geometry_;  // batch and spatial size are set per forward
  std::unique_ptr<Parameter> weight_;
  std::unique_ptr<Parameter> bias_;
  Tensor input_;  // the last forward's input, for backward
  ActivationFormat format_;  // of the activations on a device
};

}  // namespace aiacc::models
