// Batch normalisation layer (torch.nn.BatchNorm1d/2d semantics) over [N, C] or [N, C, H, W]:
// learnable per-channel scale and shift, batch statistics in training, running statistics in
// eval mode. Legend: N = batch, C = channels, H, W = spatial dims.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/batch_norm.h"
#include "models/layers/layer.h"

namespace aiacc::models {

// Sums a vector element-wise over all data-parallel replicas, in place (the same call on every
// replica, in the same order). What synchronised batch norm needs from the trainer.
using CrossReplicaSum = std::function<void(std::span<double>)>;

class BatchNorm : public Layer {
 public:
  // Parameters "<name>.weight" (gamma, ones) and "<name>.bias" (beta, zeros), both [C] and
  // without weight decay. Running mean starts at 0, running variance at 1. momentum and eps
  // as in PyTorch: running = (1 - momentum) * running + momentum * batch statistic (unbiased
  // variance), eps is added to the variance. `dtype` is f32 or f64; inputs must match it.
  BatchNorm(std::string name, std::int64_t channels, double momentum = 0.1, double eps = 1e-5,
            DType dtype = DType::f32);

  // input [N, C] or [N, C, H, W] (any rank >= 2 with dim 1 = C) -> same shape. Training:
  // normalises with the batch statistics (needs N*H*W > 1) and updates the running ones;
  // eval: normalises with the running statistics. Throws InternalError naming the layer on a
  // shape or dtype mismatch.
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output (the forward's output shape) -> dL/dinput. Differentiates through the batch
  // statistics after a training forward, treats the running ones as constants after an eval
  // forward. Overwrites weight then bias grads and fires each one's grad_ready() once.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }
  std::string name() const override { return name_; }

  // Checkpointed state under PyTorch's state-dict names: "<name>.running_mean" [C],
  // "<name>.running_var" [C] (layer dtype) and "<name>.num_batches_tracked" (i64 scalar).
  // The tensors share storage with the layer, so loading a checkpoint can copy into them.
  std::vector<std::pair<std::string, Tensor>> buffers() override;
  // Also moves the running statistics (num_batches_tracked, a host counter, stays). On a device:
  // f32, not synchronised across replicas, and backward only after a training forward.
  void to(Device device, const ActivationFormat& format = {}) override;
  // On a device: also apply the ReLU that follows (Sequential::to fuses a BatchNorm + ReLU pair
  // there and makes the ReLU a pass-through): one pass over the activations instead of two.
  void set_fused_relu(bool fused) { fused_relu_ = fused; }
  bool fused_relu() const { return fused_relu_; }

  // Synchronised batch norm (SyncBatchNorm): in training, mean and variance are taken over
  // the batches of all replicas (two sums per forward, one per backward through `sum`), so N
  // replicas with batch B normalise exactly like one with batch N*B. Weight and bias gradients
  // stay this replica's (the dense all-reduce averages them). Empty: local statistics.
  void set_cross_replica_sum(CrossReplicaSum sum) { cross_replica_sum_ = std::move(sum); }

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  std::int64_t num_batches_tracked() const { return num_batches_tracked_.data<std::int64_t>()[0]; }

 private:
  // The storage of `input` (4-D ones on a device in the format set by to(), others the
  // weights' f32 or f64).
  ActivationFormat activation_format(const Tensor& input) const;
  kernels::BatchNormGeometry geometry(const Tensor& t) const;
  Tensor forward_on_device(const Tensor& input, bool training);  // f32 through DeviceOps
  template <class T>
  Tensor forward_typed(const Tensor& input, bool training);
  template <class T>
  Tensor backward_typed(const Tensor& grad_output, bool need_input_grad);

  std::string name_;
  std::int64_t channels_;
  kernels::BatchNormOptions options_;
  Parameter weight_;
  Parameter bias_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor num_batches_tracked_;
  // What the last forward normalised with, for backward.
  Tensor input_;
  ActivationFormat format_;  // of 4-D inputs on a device (2-D ones are f32)
  bool fused_relu_ = false;
  Tensor output_;  // with a fused ReLU: the last forward's output, whose sign backward needs
  Tensor saved_mean_;     // [C]
  Tensor saved_inv_std_;  // [C]
  kernels::BatchNormStats saved_stats_ = kernels::BatchNormStats::batch;
  CrossReplicaSum cross_replica_sum_;
  double global_count_ = 0;  // values per channel over all replicas (synchronised forward)

  template <class T>
  void forward_synchronised(const kernels::BatchNormGeometry& g, const T* x, T* y);
  template <class T>
  void backward_synchronised(const kernels::BatchNormGeometry& g, const T* dy, T* dx);
};

}  // namespace aiacc::models
