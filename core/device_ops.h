// Compute on a device other than the CPU, as layers and the dense optimiser need it. core knows
// no device API: the module that does registers its ops at start-up
// (cuda::register_device_ops() in core/cuda/device_ops.h), after which layers whose tensors live
// on that device kind run through them. Tests register a fake device backed by host memory
// (tests/core/fake_device.h), so the dispatch itself is checked on machines without a GPU.
// Every pointer is f32 memory of `device`; calls are queued on the device's current stream
// unless they say they wait.
#pragma once

#include <cstdint>
#include <memory>

#include "core/kernels/linear.h"
#include "core/optim/adam.h"
#include "core/optim/sgd.h"
#include "core/tensor.h"

namespace aiacc {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  // y[N, O] = x[N, I] w[O, I]^T + b[O] (b may be null).
  virtual void linear_forward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                              const float* w, const float* b, float* y) = 0;
  // dx = dy w, dw = dy^T x, db = column sums of dy; each may be null, the others overwritten.
  virtual void linear_backward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                               const float* w, const float* dy, float* dx, float* dw, float* db) = 0;
  // y = max(x, 0); dx = dy where y > 0, else 0.
  virtual void relu_forward(const Device& device, std::int64_t n, const float* x, float* y) = 0;
  virtual void relu_backward(const Device& device, std::int64_t n, const float* y, const float* dy,
                             float* dx) = 0;
  // Mean softmax cross-entropy of logits [N, C] for labels [N] (i64 on the device), writing
  // dlogits [N, C] of that mean. Waits for the result; DataError naming the first example with
  // a label outside [0, C), as the CPU kernel does.
  virtual double softmax_cross_entropy(const Device& device, std::int64_t batch, std::int64_t classes,
                                       const float* logits, const std::int64_t* labels,
                                       double label_smoothing, float* dlogits) = 0;
  // The CPU rules' updates (core/optim) over n elements; `step` 1-based. sgd's momentum may be
  // null when rule.momentum is 0.
  virtual void adam_update(const Device& device, const optim::AdamRule& rule, float* w, const float* g,
                           float* exp_avg, float* exp_avg_sq, std::int64_t n, std::int64_t step,
                           double lr) = 0;
  virtual void sgd_update(const Device& device, const optim::SgdRule& rule, float* w, const float* g,
                          float* momentum, std::int64_t n, std::int64_t step, double lr) = 0;
};

// Installs the ops of `kind` (replacing earlier ones; kept until the process exits).
void register_device_ops(DeviceKind kind, std::unique_ptr<DeviceOps> ops);
// The ops of device.kind. Throws Error naming the device when none are registered.
DeviceOps& device_ops(const Device& device);

}  // namespace aiacc
