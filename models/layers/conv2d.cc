// Conv2d layer: shape checks, dtype dispatch and parameter bookkeeping around
// core/kernels/conv2d.
#include "models/layers/conv2d.h"

#include <cmath>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/util/random.h"
#include "models/layers/detail/init.h"

namespace aiacc::models {
using detail::uniform_tensor;

Conv2d::Conv2d(std::string name, std::int64_t in_channels, std::int64_t out_channels, int kernel,
               int stride, int padding, bool bias, std::uint64_t seed, DType dtype)
    : name_(std::move(name)) {
  AIACC_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0,
              "{}: conv2d with C={} O={} kernel={} stride={} padding={}", name_, in_channels,
              out_channels, kernel, stride, padding);
  AIACC_CHECK(dtype == DType::f32 || dtype == DType::f64, "{}: conv2d dtype {} (f32 or f64)", name_,
              dtype_name(dtype));
  geometry_.in_channels = in_channels;
  geometry_.out_channels = out_channels;
  geometry_.kernel_h = geometry_.kernel_w = kernel;
  geometry_.stride_h = geometry_.stride_w = stride;
  geometry_.pad_h = geometry_.pad_w = padding;
  const std::int64_t fan_in = in_channels * kernel * kernel;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  // Separate streams keep the weight identical whether or not the layer has a bias.
  Rng weight_rng(seed, 0);
  weight_ = std::make_unique<Parameter>(
      name_ + ".weight",
      uniform_tensor(Shape{out_channels, in_channels, kernel, kernel}, dtype, bound, weight_rng));
  if (bias) {
    Rng bias_rng(seed, 1);
    bias_ = std::make_unique<Parameter>(
        name_ + ".bias", uniform_tensor(Shape{out_channels}, dtype, bound, bias_rng));
    bias_->set_decays(false);
  }
}

kernels::Conv2dGeometry Conv2d::geometry_for(const Shape& input_shape) const {
  kernels::Conv2dGeometry g = geometry_;
  g.batch = input_shape[0];
  g.height = input_shape[2];
  g.width = input_shape[3];
  return g;
}

std::vector<Parameter*> Conv2d::parameters() {
  if (bias_) return {weight_.get(), bias_.get()};
  return {weight_.get()};
}

Tensor Conv2d::forward(const Tensor& input, bool /*training*/) {
  AIACC_CHECK(input.rank() == 4 && input.dim(1) == geometry_.in_channels,
              "{}: expected input [N, {}, H, W], got {}", name_, geometry_.in_channels,
              input.shape().str());
  const Tensor& w = weight_->value();
  const DType expected = w.device().is_cpu() ? w.dtype() : format_.dtype;
  AIACC_CHECK(input.dtype() == expected && input.device() == w.device(),
              "{}: input is {} on {}, the layer takes {} on {}", name_, dtype_name(input.dtype()),
              input.device().str(), dtype_name(expected), w.device().str());
  const kernels::Conv2dGeometry g = geometry_for(input.shape());
  AIACC_CHECK(g.height + 2 * g.pad_h >= g.kernel_h && g.width + 2 * g.pad_w >= g.kernel_w,
              "{}: input {} is smaller than the {}x{} kernel (padding {})", name_,
              input.shape().str(), g.kernel_h, g.kernel_w, g.pad_h);
  input_ = input;
  if (!input.device().is_cpu()) {
    AIACC_CHECK(!bias_, "{}: on {} a convolution has no bias", name_, input.device().str());
    Tensor output = Tensor::empty(Shape{g.batch, g.out_channels, g.out_height(), g.out_width()},
                                  input.dtype(), input.device());
    device_ops(input.device()).conv2d_forward(input.device(), g, format_, input.raw_data(), w.data<float>(),
                                              output.raw_data());
    return output;
  }
  return input.dtype() == DType::f64 ? forward_typed<double>(input, g)
                                     : forward_typed<float>(input, g);
}

template <class T>
Tensor Conv2d::forward_typed(const Tensor& input, const kernels::Conv2dGeometry& g) {
  Tensor output =
      Tensor::empty(Shape{g.batch, g.out_channels, g.out_height(), g.out_width()}, input.dtype());
  kernels::conv2d_forward<T>(g, input.data<T>(), weight_->value().data<T>(),
                             bias_ ? bias_->value().data<T>() : nullptr, output.data<T>());
  return output;
}

Tensor Conv2d::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(input_.defined(), "{}: backward() without a forward()", name_);
  const kernels::Conv2dGeometry g = geometry_for(input_.shape());
  const Shape expected{g.batch, g.out_channels, g.out_height(), g.out_width()};
  AIACC_CHECK(grad_output.shape() == expected && grad_output.dtype() == input_.dtype(),
              "{}: expected grad_output {} {}, got {} {}", name_, expected.str(),
              dtype_name(input_.dtype()), grad_output.shape().str(),
              dtype_name(grad_output.dtype()));
  if (!input_.device().is_cpu()) {
    const Device device = input_.device();
    AIACC_CHECK(grad_output.device() == device, "{}: grad_output on {}, the input was on {}", name_,
                grad_output.device().str(), device.str());
    DeviceOps& ops = device_ops(device);
    const void* dy = grad_output.raw_data();
    // Parameter gradients first, so their communication can start while dx is computed.
    ops.conv2d_backward_weight(device, g, format_, input_.raw_data(), dy, weight_->grad().data<float>());
    weight_->grad_ready();
    if (!need_input_grad) return {};
    Tensor grad_input = Tensor::empty(input_.shape(), input_.dtype(), device);
    ops.conv2d_backward_data(device, g, format_, weight_->value().data<float>(), dy, grad_input.raw_data());
    return grad_input;
  }
  return input_.dtype() == DType::f64 ? backward_typed<double>(grad_output, need_input_grad)
                                      : backward_typed<float>(grad_output, need_input_grad);
}

template <class T>
Tensor Conv2d::backward_typed(const Tensor& grad_output, bool need_input_grad) {
  const kernels::Conv2dGeometry g = geometry_for(input_.shape());
  const T* dy = grad_output.data<T>();
  // Parameter gradients first, so their communication can start while dx is computed.
  kernels::conv2d_backward_weight<T>(g, input_.data<T>(), dy, weight_->grad().data<T>());
  weight_->grad_ready();
  if (bias_) {
    kernels::conv2d_backward_bias<T>(g, dy, bias_->grad().data<T>());
    bias_->grad_ready();
  }
  if (!need_input_grad) return {};
  Tensor grad_input = Tensor::empty(input_.shape(), input_.dtype());
  kernels::conv2d_backward_data<T>(g, weight_->value().data<T>(), dy, grad_input.data<T>());
  return grad_input;
}

}  // namespace aiacc::models
