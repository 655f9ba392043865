// Pooling layers: shape checks and dtype dispatch around core/kernels/pooling.
#include "models/layers/pooling.h"

#include "core/check.h"
#include "core/device_ops.h"

namespace aiacc::models {
namespace {

kernels::Pool2dGeometry square_window(const std::string& name, int kernel, int stride,
                                      int padding) {
  AIACC_CHECK(kernel > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel,
              "{}: pooling with kernel={} stride={} padding={} (need 0 <= padding <= kernel/2)",
              name, kernel, stride, padding);
  kernels::Pool2dGeometry g;
  g.kernel_h = g.kernel_w = kernel;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  return g;
}

// Checks a pooling input and fills the geometry's batch/channel/spatial fields from it.
// Checks an input's storage: f32 (or f64) on the CPU, `format` on a device.
void check_storage(const std::string& name, const Tensor& input, const ActivationFormat& format) {
  const bool ok = input.device().is_cpu() ? input.dtype() == DType::f32 || input.dtype() == DType::f64
                                          : input.dtype() == format.dtype;
  AIACC_CHECK(ok, "{}: input is {} on {} (need f32 or f64 on the CPU, {} on a device)", name,
              dtype_name(input.dtype()), input.device().str(), format.str());
}

void bind_input(const std::string& name, const Tensor& input, kernels::Pool2dGeometry& g) {
  AIACC_CHECK(input.rank() == 4, "{}: expected input [N, C, H, W], got {}", name,
              input.shape().str());
  g.batch = input.dim(0);
  g.channels = input.dim(1);
  g.height = input.dim(2);
  g.width = input.dim(3);
  AIACC_CHECK(g.height + 2 * g.pad_h >= g.kernel_h && g.width + 2 * g.pad_w >= g.kernel_w,
              "{}: input {} is smaller than the {}x{} window (padding {})", name,
              input.shape().str(), g.kernel_h, g.kernel_w, g.pad_h);
}

void check_grad(const std::string& name, bool ready, const Tensor& grad_output,
                const Shape& expected, DType dtype, Device device = Device::cpu()) {
  AIACC_CHECK(ready, "{}: backward() without a forward()", name);
  AIACC_CHECK(grad_output.device() == device, "{}: grad_output on {}, the input was on {}", name,
              grad_output.device().str(), device.str());
  AIACC_CHECK(grad_output.shape() == expected && grad_output.dtype() == dtype,
              "{}: expected grad_output {} {}, got {} {}", name, expected.str(), dtype_name(dtype),
              grad_output.shape().str(), dtype_name(grad_output.dtype()));
}

Shape pooled_shape(const kernels::Pool2dGeometry& g) {
  return Shape{g.batch, g.channels, g.out_height(), g.out_width()};
}

}  // namespace

MaxPool2d::MaxPool2d(std::string name, int kernel, int stride, int padding)
    : name_(std::move(name)), geometry_(square_window(name_, kernel, stride, padding)) {}

Tensor MaxPool2d::forward(const Tensor& input, bool /*training*/) {
  bind_input(name_, input, geometry_);
  check_storage(name_, input, format_);
  dtype_ = input.dtype();
  device_ = input.device();
  if (!device_.is_cpu()) {
    // The device's backward finds the maxima again from input and output (as cuDNN does).
    input_ = input;
    output_ = Tensor::empty(pooled_shape(geometry_), dtype_, device_);
    device_ops(device_).pool2d_forward(device_, geometry_, format_, true, input.raw_data(), output_.raw_data());
    return output_;
  }
  Tensor output = Tensor::empty(pooled_shape(geometry_), dtype_);
  argmax_ = Tensor::empty(pooled_shape(geometry_), DType::i64);
  if (dtype_ == DType::f64) {
    kernels::max_pool2d_forward<double>(geometry_, input.data<double>(), output.data<double>(),
                                        argmax_.data<std::int64_t>());
  } else {
    kernels::max_pool2d_forward<float>(geometry_, input.data<float>(), output.data<float>(),
                                       argmax_.data<std::int64_t>());
  }
  return output;
}

Tensor MaxPool2d::backward(const Tensor& grad_output, bool need_input_grad) {
  check_grad(name_, argmax_.defined() || output_.defined(), grad_output, pooled_shape(geometry_), dtype_,
             device_);
  if (!need_input_grad) return {};
  const kernels::Pool2dGeometry& g = geometry_;
  Tensor grad_input = Tensor::empty(Shape{g.batch, g.channels, g.height, g.width}, dtype_, device_);
  if (!device_.is_cpu()) {
    device_ops(device_).pool2d_backward(device_, g, format_, true, input_.raw_data(), output_.raw_data(),
                                        grad_output.raw_data(), grad_input.raw_data());
  } else if (dtype_ == DType::f64) {
    kernels::max_pool2d_backward<double>(g, grad_output.data<double>(),
                                         argmax_.data<std::int64_t>(), grad_input.data<double>());
  } else {
    kernels::max_pool2d_backward<float>(g, grad_output.data<float>(), argmax_.data<std::int64_t>(),
                                        grad_input.data<float>());
  }
  return grad_input;
}

AvgPool2d::AvgPool2d(std::string name, int kernel, int stride, int padding)
    : name_(std::move(name)), geometry_(square_window(name_, kernel, stride, padding)) {}

Tensor AvgPool2d::forward(const Tensor& input, bool /*training*/) {
  bind_input(name_, input, geometry_);
  check_storage(name_, input, format_);
  dtype_ = input.dtype();
  device_ = input.device();
  ready_ = true;
  Tensor output = Tensor::empty(pooled_shape(geometry_), dtype_, device_);
  if (!device_.is_cpu()) {
    input_ = input;  // cuDNN's backward takes the forward's tensors
    output_ = output;
    device_ops(device_).pool2d_forward(device_, geometry_, format_, false, input.raw_data(), output.raw_data());
  } else if (dtype_ == DType::f64) {
    kernels::avg_pool2d_forward<double>(geometry_, input.data<double>(), output.data<double>());
  } else {
    kernels::avg_pool2d_forward<float>(geometry_, input.data<float>(), output.data<float>());
  }
  return output;
}

Tensor AvgPool2d::backward(const Tensor& grad_output, bool need_input_grad) {
  check_grad(name_, ready_, grad_output, pooled_shape(geometry_), dtype_, device_);
  if (!need_input_grad) return {};
  const kernels::Pool2dGeometry& g = geometry_;
  Tensor grad_input = Tensor::empty(Shape{g.batch, g.channels, g.height, g.width}, dtype_, device_);
  if (!device_.is_cpu()) {
    device_ops(device_).pool2d_backward(device_, g, format_, false, input_.raw_data(), output_.raw_data(),
                                        grad_output.raw_data(), grad_input.raw_data());
  } else if (dtype_ == DType::f64) {
    kernels::avg_pool2d_backward<double>(g, grad_output.data<double>(), grad_input.data<double>());
  } else {
    kernels::avg_pool2d_backward<float>(g, grad_output.data<float>(), grad_input.data<float>());
  }
  return grad_input;
}

Tensor GlobalAvgPool::forward(const Tensor& input, bool /*training*/) {
  AIACC_CHECK(input.rank() == 4 && input.dim(2) * input.dim(3) > 0,
              "{}: expected input [N, C, H, W], got {}", name_, input.shape().str());
  check_storage(name_, input, format_);
  input_shape_ = input.shape();
  dtype_ = input.dtype();
  device_ = input.device();
  const std::int64_t n = input.dim(0), c = input.dim(1), spatial = input.dim(2) * input.dim(3);
  // On a device the classifier's input is f32 in every activation format.
  Tensor output = Tensor::empty(Shape{n, c}, device_.is_cpu() ? dtype_ : DType::f32, device_);
  if (!device_.is_cpu()) {
    device_ops(device_).global_avg_pool_forward(device_, format_, n, c, spatial, input.raw_data(),
                                                output.data<float>());
  } else if (dtype_ == DType::f64) {
    kernels::global_avg_pool_forward<double>(n, c, spatial, input.data<double>(),
                                             output.data<double>());
  } else {
    kernels::global_avg_pool_forward<float>(n, c, spatial, input.data<float>(),
                                            output.data<float>());
  }
  return output;
}

Tensor GlobalAvgPool::backward(const Tensor& grad_output, bool need_input_grad) {
  const bool ready = input_shape_.rank() == 4;
  const Shape expected = ready ? Shape{input_shape_[0], input_shape_[1]} : Shape{};
  check_grad(name_, ready, grad_output, expected, device_.is_cpu() ? dtype_ : DType::f32, device_);
  if (!need_input_grad) return {};
  const std::int64_t n = input_shape_[0], c = input_shape_[1];
  const std::int64_t spatial = input_shape_[2] * input_shape_[3];
  Tensor grad_input = Tensor::empty(input_shape_, dtype_, device_);
  if (!device_.is_cpu()) {
    device_ops(device_).global_avg_pool_backward(device_, format_, n, c, spatial, grad_output.data<float>(),
                                                 grad_input.raw_data());
  } else if (dtype_ == DType::f64) {
    kernels::global_avg_pool_backward<double>(n, c, spatial, grad_output.data<double>(),
                                              grad_input.data<double>());
  } else {
    kernels::global_avg_pool_backward<float>(n, c, spatial, grad_output.data<float>(),
                                             grad_input.data<float>());
  }
  return grad_input;
}

}  // namespace aiacc::models
