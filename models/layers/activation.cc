// ReLU layer: shape checks and dtype dispatch around core/kernels/activation.
#include "models/layers/activation.h"

#include "core/check.h"
#include "core/device_ops.h"
#include "core/kernels/activation.h"

namespace aiacc::models {

Tensor ReLU::forward(const Tensor& input, bool /*training*/) {
  if (passthrough_) return input;  // applied by the batch norm before it
  const bool on_cpu = input.device().is_cpu();
  AIACC_CHECK(
      input.dtype() == DType::f32 || (input.dtype() == DType::f64 && on_cpu) ||
          ((input.dtype() == DType::bf16 || input.dtype() == DType::f16) && !on_cpu),
      "{}: input {} is {} on {} (need f32, f64 on the CPU, or bf16 or f16 on a device)", name_, input.shape().str(),
      dtype_name(input.dtype()), input.device().str());
  output_ = Tensor::empty(input.shape(), input.dtype(), input.device());
  if (!input.device().is_cpu()) {
    device_ops(input.device())
        .relu_forward(input.device(), input.dtype(), input.numel(), input.raw_data(), output_.raw_data());
  } else if (input.dtype() == DType::f64) {
    kernels::relu_forward<double>(input.numel(), input.data<double>(), output_.data<double>());
  } else {
    kernels::relu_forward<float>(input.numel(), input.data<float>(), output_.data<float>());
  }
  return output_;
}

Tensor ReLU::backward(const Tensor& grad_output, bool need_input_grad) {
  if (passthrough_) return need_input_grad ? grad_output : Tensor();
  AIACC_CHECK(output_.defined(), "{}: backward() without a forward()", name_);
  AIACC_CHECK(grad_output.shape() == output_.shape() && grad_output.dtype() == output_.dtype(),
              "{}: expected grad_output {} {}, got {} {}", name_, output_.shape().str(),
              dtype_name(output_.dtype()), grad_output.shape().str(),
              dtype_name(grad_output.dtype()));
  if (!need_input_grad) return {};
  Tensor grad_input = Tensor::empty(output_.shape(), output_.dtype(), output_.device());
  if (!output_.device().is_cpu()) {
    AIACC_CHECK(grad_output.device() == output_.device(), "{}: grad_output on {}, the output on {}",
                name_, grad_output.device().str(), output_.device().str());
    device_ops(output_.device())
        .relu_backward(output_.device(), output_.dtype(), output_.numel(), output_.raw_data(),
                       grad_output.raw_data(), grad_input.raw_data());
  } else if (output_.dtype() == DType::f64) {
    kernels::relu_backward<double>(output_.numel(), output_.data<double>(),
                                   grad_output.data<double>(), grad_input.data<double>());
  } else {
    kernels::relu_backward<float>(output_.numel(), output_.data<float>(), grad_output.data<float>(),
                                  grad_input.data<float>());
  }
  return grad_input;
}

}  // namespace aiacc::models
