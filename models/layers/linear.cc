// Linear layer: shape checks, dtype dispatch and parameter bookkeeping around
// core/kernels/linear.
#include "models/layers/linear.h"

#include <cmath>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/kernels/linear.h"
#include "core/util/random.h"
#include "models/layers/detail/init.h"

namespace aiacc::models {
using detail::uniform_tensor;

Linear::Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias,
               std::uint64_t seed, DType dtype)
    : name_(std::move(name)), in_features_(in_features), out_features_(out_features) {
  AIACC_CHECK(in_features > 0 && out_features > 0, "{}: linear layer with {} -> {} features", name_,
              in_features, out_features);
  AIACC_CHECK(dtype == DType::f32 || dtype == DType::f64, "{}: linear layer dtype {} (f32 or f64)",
              name_, dtype_name(dtype));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  // Separate streams keep the weight identical whether or not the layer has a bias.
  Rng weight_rng(seed, 0);
  weight_ = std::make_unique<Parameter>(
      name_ + ".weight",
      uniform_tensor(Shape{out_features, in_features}, dtype, bound, weight_rng));
  if (bias) {
    Rng bias_rng(seed, 1);
    bias_ = std::make_unique<Parameter>(
        name_ + ".bias", uniform_tensor(Shape{out_features}, dtype, bound, bias_rng));
    bias_->set_decays(false);
  }
}

std::vector<Parameter*> Linear::parameters() {
  if (bias_) return {weight_.get(), bias_.get()};
  return {weight_.get()};
}

Tensor Linear::forward(const Tensor& input, bool /*training*/) {
  AIACC_CHECK(input.rank() == 2 && input.dim(1) == in_features_,
              "{}: expected input [N, {}], got {}", name_, in_features_, input.shape().str());
  const Tensor& w = weight_->value();
  AIACC_CHECK(input.dtype() == w.dtype() && input.device() == w.device(),
              "{}: input is {} on {}, the layer is {} on {}", name_, dtype_name(input.dtype()),
              input.device().str(), dtype_name(w.dtype()), w.device().str());
  input_ = input;
  if (!input.device().is_cpu()) {
    AIACC_CHECK(input.dtype() == DType::f32, "{}: f32 on {}, got {}", name_, input.device().str(),
                dtype_name(input.dtype()));
    const kernels::LinearGeometry g{input.dim(0), in_features_, out_features_};
    Tensor output = Tensor::empty(Shape{g.batch, out_features_}, DType::f32, input.device());
    device_ops(input.device())
        .linear_forward(input.device(), g, input.data<float>(), w.data<float>(),
                        bias_ ? bias_->value().data<float>() : nullptr, output.data<float>());
    return output;
  }
  return input.dtype() == DType::f64 ? forward_typed<double>(input) : forward_typed<float>(input);
}

template <class T>
Tensor Linear::forward_typed(const Tensor& input) {
  const kernels::LinearGeometry g{input.dim(0), in_features_, out_features_};
  Tensor output = Tensor::empty(Shape{g.batch, out_features_}, input.dtype());
  kernels::linear_forward<T>(g, input.data<T>(), weight_->value().data<T>(),
                             bias_ ? bias_->value().data<T>() : nullptr, output.data<T>());
  return output;
}

Tensor Linear::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(input_.defined(), "{}: backward() without a forward()", name_);
  AIACC_CHECK(grad_output.shape() == Shape({input_.dim(0), out_features_}) &&
                  grad_output.dtype() == input_.dtype(),
              "{}: expected grad_output [{}, {}] {}, got {} {}", name_, input_.dim(0),
              out_features_, dtype_name(input_.dtype()), grad_output.shape().str(),
              dtype_name(grad_output.dtype()));
  if (!input_.device().is_cpu()) return backward_on_device(grad_output, need_input_grad);
  return input_.dtype() == DType::f64 ? backward_typed<double>(grad_output, need_input_grad)
                                      : backward_typed<float>(grad_output, need_input_grad);
}

Tensor Linear::backward_on_device(const Tensor& grad_output, bool need_input_grad) {
  const Device device = input_.device();
  AIACC_CHECK(grad_output.device() == device, "{}: grad_output on {}, the input was on {}", name_,
              grad_output.device().str(), device.str());
  const kernels::LinearGeometry g{input_.dim(0), in_features_, out_features_};
  DeviceOps& ops = device_ops(device);
  const float* x = input_.data<float>();
  const float* w = weight_->value().data<float>();
  const float* dy = grad_output.data<float>();
  // Parameter gradients first, so their communication can start while dx is computed.
  ops.linear_backward(device, g, x, w, dy, nullptr, weight_->grad().data<float>(),
                      bias_ ? bias_->grad().data<float>() : nullptr);
  weight_->grad_ready();
  if (bias_) bias_->grad_ready();
  if (!need_input_grad) return {};
  Tensor grad_input = Tensor::empty(input_.shape(), DType::f32, device);
  ops.linear_backward(device, g, x, w, dy, grad_input.data<float>(), nullptr, nullptr);
  return grad_input;
}

template <class T>
Tensor Linear::backward_typed(const Tensor& grad_output, bool need_input_grad) {
  const kernels::LinearGeometry g{input_.dim(0), in_features_, out_features_};
  const T* x = input_.data<T>();
  const T* w = weight_->value().data<T>();
  const T* dy = grad_output.data<T>();
  // Parameter gradients first, so their communication can start while dx is computed.
  kernels::linear_backward<T>(g, x, w, dy, nullptr, weight_->grad().data<T>(), nullptr);
  weight_->grad_ready();
  if (bias_) {
    kernels::bias_grad_rows<T>(g.batch, g.out_features, dy, bias_->grad().data<T>());
    bias_->grad_ready();
  }
  if (!need_input_grad) return {};
  Tensor grad_input = Tensor::empty(input_.shape(), input_.dtype());
  kernels::linear_backward<T>(g, x, w, dy, grad_input.data<T>(), nullptr, nullptr);
  return grad_input;
}

}  // namespace aiacc::models
