// BatchNorm layer: shape checks, dtype dispatch, running-statistic state and parameter
// bookkeeping around core/kernels/batch_norm.
#include "models/layers/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/device_ops.h"

namespace aiacc::models {

BatchNorm::BatchNorm(std::string name, std::int64_t channels, double momentum, double eps,
                     DType dtype)
    : name_(std::move(name)),
      channels_(channels),
      options_{momentum, eps},
      weight_(name_ + ".weight",
              Tensor::full(Shape{std::max<std::int64_t>(channels, 0)}, 1.0, dtype)),
      bias_(name_ + ".bias", Tensor::zeros(Shape{std::max<std::int64_t>(channels, 0)}, dtype)) {
  AIACC_CHECK_GT(channels, 0, "{}: batch norm channels", name_);
  AIACC_CHECK(dtype == DType::f32 || dtype == DType::f64, "{}: batch norm dtype {} (f32 or f64)",
              name_, dtype_name(dtype));
  AIACC_CHECK(momentum >= 0.0 && momentum <= 1.0 && eps > 0.0,
              "{}: batch norm momentum {} (in [0, 1]) and eps {} (> 0)", name_, momentum, eps);
  weight_.set_decays(false);
  bias_.set_decays(false);
  running_mean_ = Tensor::zeros(Shape{channels}, dtype);
  running_var_ = Tensor::full(Shape{channels}, 1.0, dtype);
  num_batches_tracked_ = Tensor::zeros(Shape{}, DType::i64);
}

std::vector<std::pair<std::string, Tensor>> BatchNorm::buffers() {
  return {{name_ + ".running_mean", running_mean_},
          {name_ + ".running_var", running_var_},
          {name_ + ".num_batches_tracked", num_batches_tracked_}};
}

kernels::BatchNormGeometry BatchNorm::geometry(const Tensor& t) const {
  std::int64_t spatial = 1;
  for (int axis = 2; axis < t.rank(); ++axis) spatial *= t.dim(axis);
  return {t.dim(0), channels_, spatial};
}

Tensor BatchNorm::forward(const Tensor& input, bool training) {
  AIACC_CHECK(input.rank() >= 2 && input.dim(1) == channels_,
              "{}: expected input [N, {}] or [N, {}, H, W], got {}", name_, channels_, channels_,
              input.shape().str());
  AIACC_CHECK(input.dtype() == activation_format(input).dtype && input.device() == weight_.value().device(),
              "{}: input is {} on {}, the layer is {} on {} with {} activations", name_, dtype_name(input.dtype()),
              input.device().str(), dtype_name(weight_.value().dtype()), weight_.value().device().str(),
              activation_format(input).str());
  if (training) {
    AIACC_CHECK_GT(input.numel() / channels_, 1,
                   "{}: training needs more than one value per channel, input {}", name_,
                   input.shape().str());
  }
  input_ = input;
  if (!input.device().is_cpu()) return forward_on_device(input, training);
  return input.dtype() == DType::f64 ? forward_typed<double>(input, training)
                                     : forward_typed<float>(input, training);
}

ActivationFormat BatchNorm::activation_format(const Tensor& input) const {
  if (input.rank() == 4 && !input.device().is_cpu()) return format_;
  ActivationFormat f32;
  f32.dtype = weight_.value().dtype();  // f64 for gradient checks on the CPU
  return f32;
}

void BatchNorm::to(Device device, const ActivationFormat& format) {
  format_ = format;
  weight_.to(device);
  bias_.to(device);
  running_mean_ = running_mean_.to(device);
  running_var_ = running_var_.to(device);
}

Tensor BatchNorm::forward_on_device(const Tensor& input, bool training) {
  const Device device = input.device();
  AIACC_CHECK(!(training && cross_replica_sum_),
              "{}: on {} batch norm is not synchronised across replicas", name_, device.str());
  const kernels::BatchNormGeometry g = geometry(input);
  const ActivationFormat format = activation_format(input);
  Tensor output = Tensor::empty(input.shape(), input.dtype(), device);
  DeviceOps& ops = device_ops(device);
  if (training) {
    saved_mean_ = Tensor::empty(Shape{channels_}, DType::f32, device);
    saved_inv_std_ = Tensor::empty(Shape{channels_}, DType::f32, device);
    ops.batch_norm_forward_train(device, g, format, options_, input.raw_data(), weight_.value().data<float>(),
                                 bias_.value().data<float>(), output.raw_data(), saved_mean_.data<float>(),
                                 saved_inv_std_.data<float>(), running_mean_.data<float>(),
                                 running_var_.data<float>(), fused_relu_);
    num_batches_tracked_.data<std::int64_t>()[0] += 1;
    saved_stats_ = kernels::BatchNormStats::batch;
  } else {
    ops.batch_norm_forward_eval(device, g, format, options_, input.raw_data(), weight_.value().data<float>(),
                                bias_.value().data<float>(), running_mean_.data<float>(),
                                running_var_.data<float>(), output.raw_data(), fused_relu_);
    saved_stats_ = kernels::BatchNormStats::running;
  }
  output_ = fused_relu_ ? output : Tensor();
  return output;
}

template <class T>
Tensor BatchNorm::forward_typed(const Tensor& input, bool training) {
  const kernels::BatchNormGeometry g = geometry(input);
  Tensor output = Tensor::empty(input.shape(), input.dtype());
  saved_mean_ = Tensor::empty(Shape{channels_}, input.dtype());
  saved_inv_std_ = Tensor::empty(Shape{channels_}, input.dtype());
  const T* gamma = weight_.value().data<T>();
  const T* beta = bias_.value().data<T>();
  if (training && cross_replica_sum_) {
    forward_synchronised<T>(g, input.data<T>(), output.data<T>());
    num_batches_tracked_.data<std::int64_t>()[0] += 1;
    saved_stats_ = kernels::BatchNormStats::batch;
  } else if (training) {
    kernels::batch_norm_forward_train<T>(
        g, options_, input.data<T>(), gamma, beta, output.data<T>(), saved_mean_.data<T>(),
        saved_inv_std_.data<T>(), running_mean_.data<T>(), running_var_.data<T>());
    num_batches_tracked_.data<std::int64_t>()[0] += 1;
    saved_stats_ = kernels::BatchNormStats::batch;
  } else {
    kernels::batch_norm_forward_eval<T>(g, options_, input.data<T>(), gamma, beta,
                                        running_mean_.data<T>(), running_var_.data<T>(),
                                        output.data<T>());
    saved_mean_.copy_from(running_mean_);
    const T* var = running_var_.data<T>();
    T* inv_std = saved_inv_std_.data<T>();
    for (std::int64_t c = 0; c < channels_; ++c) {
      inv_std[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var[c]) + options_.eps));
    }
    saved_stats_ = kernels::BatchNormStats::running;
  }
  return output;
}

Tensor BatchNorm::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(input_.defined(), "{}: backward() without a forward()", name_);
  AIACC_CHECK(grad_output.shape() == input_.shape() && grad_output.dtype() == input_.dtype(),
              "{}: expected grad_output {} {}, got {} {}", name_, input_.shape().str(),
              dtype_name(input_.dtype()), grad_output.shape().str(),
              dtype_name(grad_output.dtype()));
  Tensor grad_input;
  if (!input_.device().is_cpu()) {
    const Device device = input_.device();
    AIACC_CHECK(saved_stats_ == kernels::BatchNormStats::batch && grad_output.device() == device,
                "{}: backward on {} follows a training forward there (grad_output on {})", name_,
                device.str(), grad_output.device().str());
    grad_input = Tensor::empty(input_.shape(), input_.dtype(), device);  // cuDNN always writes dx
    device_ops(device).batch_norm_backward(device, geometry(input_), activation_format(input_), options_,
                                           input_.raw_data(), grad_output.raw_data(),
                                           fused_relu_ ? output_.raw_data() : nullptr,
                                           weight_.value().data<float>(), saved_mean_.data<float>(),
                                           saved_inv_std_.data<float>(), grad_input.raw_data(),
                                           weight_.grad().data<float>(),
                                           bias_.grad().data<float>());
    if (!need_input_grad) grad_input = Tensor();
  } else {
    grad_input = input_.dtype() == DType::f64 ? backward_typed<double>(grad_output, need_input_grad)
                                              : backward_typed<float>(grad_output, need_input_grad);
  }
  weight_.grad_ready();
  bias_.grad_ready();
  return grad_input;
}

template <class T>
Tensor BatchNorm::backward_typed(const Tensor& grad_output, bool need_input_grad) {
  Tensor grad_input;
  if (need_input_grad) grad_input = Tensor::empty(input_.shape(), input_.dtype());
  T* dx = need_input_grad ? grad_input.data<T>() : nullptr;
  if (cross_replica_sum_ && saved_stats_ == kernels::BatchNormStats::batch) {
    backward_synchronised<T>(geometry(input_), grad_output.data<T>(), dx);
    return grad_input;
  }
  kernels::batch_norm_backward<T>(geometry(input_), saved_stats_, input_.data<T>(),
                                  grad_output.data<T>(), weight_.value().data<T>(),
                                  saved_mean_.data<T>(), saved_inv_std_.data<T>(), dx,
                                  weight_.grad().data<T>(), bias_.grad().data<T>());
  return grad_input;
}

template <class T>
void BatchNorm::forward_synchronised(const kernels::BatchNormGeometry& g, const T* x, T* y) {
  const auto cs = static_cast<std::size_t>(channels_);
  std::vector<double> mean(cs), m2(cs);
  kernels::batch_norm_moments<T>(g, x, mean.data(), m2.data());
  // Merge the replicas' (count, mean, M2) by Chan's rule with two sums: the global count and
  // mean first, then each replica's M2 plus its mean's squared offset from the global mean.
  const auto local_count = static_cast<double>(g.values_per_channel());
  std::vector<double> first(cs + 1);
  for (std::size_t c = 0; c < cs; ++c) first[c] = local_count * mean[c];
  first[cs] = local_count;
  cross_replica_sum_(first);
  const double count = first[cs];
  std::vector<double> global_mean(cs), second(cs);
  for (std::size_t c = 0; c < cs; ++c) {
    global_mean[c] = first[c] / count;
    const double offset = mean[c] - global_mean[c];
    second[c] = m2[c] + local_count * offset * offset;
  }
  cross_replica_sum_(second);
  global_count_ = count;
  kernels::batch_norm_forward_from_moments<T>(
      g, options_, count, global_mean.data(), second.data(), x, weight_.value().data<T>(),
      bias_.value().data<T>(), y, saved_mean_.data<T>(), saved_inv_std_.data<T>(),
      running_mean_.data<T>(), running_var_.data<T>());
}

template <class T>
void BatchNorm::backward_synchronised(const kernels::BatchNormGeometry& g, const T* dy, T* dx) {
  const auto cs = static_cast<std::size_t>(channels_);
  const T* x = input_.data<T>();
  const T* mean = saved_mean_.data<T>();
  const T* inv_std = saved_inv_std_.data<T>();
  // [sum dy | sum dy * xhat] of this replica: its weight and bias gradients (the dense
  // all-reduce averages them like every other gradient).
  std::vector<double> sums(2 * cs);
  kernels::batch_norm_backward_sums<T>(g, x, dy, mean, inv_std, sums.data(), sums.data() + cs);
  T* dgamma = weight_.grad().data<T>();
  T* dbeta = bias_.grad().data<T>();
  for (std::size_t c = 0; c < cs; ++c) {
    dbeta[c] = static_cast<T>(sums[c]);
    dgamma[c] = static_cast<T>(sums[cs + c]);
  }
  // dx needs the sums over every replica. Each replica's loss is a mean over its own batch,
  // so every dy carries the same factor (replicas) relative to the global loss: the sums
  // combine consistently, and the average of the parameter gradients removes the factor.
  cross_replica_sum_(sums);
  if (dx == nullptr) return;
  kernels::batch_norm_backward_input<T>(g, kernels::BatchNormStats::batch, global_count_, x, dy,
                                        weight_.value().data<T>(), mean, inv_std, sums.data(),
                                        sums.data() + cs, dx);
}

}  // namespace aiacc::models
