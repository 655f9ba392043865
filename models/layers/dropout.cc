// Dropout layer: mask bookkeeping and dtype dispatch around core/kernels/dropout.
#include "models/layers/dropout.h"

#include "core/check.h"
#include "core/kernels/dropout.h"

namespace aiacc::models {
namespace {

Tensor apply_mask(const Tensor& x, const std::vector<std::uint8_t>& mask, double p) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.dtype() == DType::f64) {
    kernels::dropout_apply<double>(x.numel(), x.data<double>(), mask.data(), p, y.data<double>());
  } else {
    kernels::dropout_apply<float>(x.numel(), x.data<float>(), mask.data(), p, y.data<float>());
  }
  return y;
}

}  // namespace

Dropout::Dropout(std::string name, double p, std::uint64_t seed)
    : name_(std::move(name)), p_(p), seed_(seed) {
  AIACC_CHECK(p >= 0.0 && p <= 1.0, "{}: dropout probability {} outside [0, 1]", name_, p);
}

Tensor Dropout::forward(const Tensor& input, bool training) {
  AIACC_CHECK(
      (input.dtype() == DType::f32 || input.dtype() == DType::f64) && input.device().is_cpu(),
      "{}: dropout input is {} on {} (f32 or f64 on cpu)", name_, dtype_name(input.dtype()),
      input.device().str());
  shape_ = input.shape();
  dtype_ = input.dtype();
  masked_ = training && p_ > 0.0;
  if (!masked_) return input;
  mask_.resize(static_cast<std::size_t>(input.numel()));
  kernels::dropout_mask(input.numel(), p_, seed_, step(), mask_.data());
  set_step(step() + 1);
  return apply_mask(input, mask_, p_);
}

Tensor Dropout::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(grad_output.shape() == shape_ && grad_output.dtype() == dtype_,
              "{}: expected grad_output {} {}, got {} {}", name_, shape_.str(), dtype_name(dtype_),
              grad_output.shape().str(), dtype_name(grad_output.dtype()));
  if (!need_input_grad) return {};
  if (!masked_) return grad_output;
  return apply_mask(grad_output, mask_, p_);
}

}  // namespace aiacc::models
