// Compute on a device other than the CPU, as layers and the dense optimiser need it. core knows
// no device API: the module that does registers its ops at start-up
// (cuda::register_device_ops() in core/cuda/device_ops.h), after which layers whose tensors live
// on that device kind run through them. Tests register a fake device backed by host memory
// (tests/core/fake_device.h), so the dispatch itself is checked on machines without a GPU.
// Pointers are memory of `device` (f32 unless an ActivationFormat or dtype says otherwise);
// calls are queued on the device's current stream unless they say they wait.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/kernels/batch_norm.h"
#include "core/kernels/conv2d.h"
#include "core/kernels/embedding_bag.h"
#include "core/kernels/linear.h"
#include "core/kernels/pooling.h"
#include "core/optim/adam.h"
#include "core/optim/sgd.h"
#include "core/tensor.h"

namespace aiacc {

// How a model's activations are stored on a device. Parameters, their gradients and optimiser
// state are f32 in the CPU's layout in every format; a bf16 format is mixed precision: f32
// master weights, bf16 activations and activation gradients, f32 accumulation.
struct ActivationFormat {
  DType dtype = DType::f32;    // f32 or bf16
  bool channels_last = false;  // 4-D activations [N, C, H, W] held as NHWC memory
  bool operator==(const ActivationFormat&) const = default;
  bool is_default() const { return *this == ActivationFormat{}; }
  std::string str() const;  // "f32 nchw", "bf16 nhwc"
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  // y[N, O] = x[N, I] w[O, I]^T + b[O] (b may be null).
  virtual void linear_forward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                              const float* w, const float* b, float* y) = 0;
  // dx = dy w, dw = dy^T x, db = column sums of dy; each may be null, the others overwritten.
  virtual void linear_backward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                               const float* w, const float* dy, float* dx, float* dw, float* db) = 0;
  // Element-wise ops over n values of `dtype` (f32 or bf16; layout does not matter).
  // y = max(x, 0); dx = dy where y > 0, else 0.
  virtual void relu_forward(const Device& device, DType dtype, std::int64_t n, const void* x, void* y) = 0;
  virtual void relu_backward(const Device& device, DType dtype, std::int64_t n, const void* y, const void* dy,
                             void* dx) = 0;
  // y = a + b; y = max(a + b, 0) (the residual join). y may equal a or b.
  virtual void add(const Device& device, DType dtype, std::int64_t n, const void* a, const void* b, void* y) = 0;
  virtual void add_relu(const Device& device, DType dtype, std::int64_t n, const void* a, const void* b,
                        void* y) = 0;
  // Activations x, y, dx, dy below are [N, C, H, W] in `format`; weights and their gradients
  // are f32 in the CPU's layout whatever the format.
  // y = x in `format`, from x f32 [N, C, H, W] (a model's input batch).
  virtual void to_activation_format(const Device& device, const ActivationFormat& format, std::int64_t batch,
                                    std::int64_t channels, std::int64_t spatial, const float* x, void* y) = 0;
  // Convolution without bias (core/kernels/conv2d.h's geometry; w [O, C, KH, KW]); outputs
  // overwritten.
  virtual void conv2d_forward(const Device& device, const kernels::Conv2dGeometry& g,
                              const ActivationFormat& format, const void* x, const float* w, void* y) = 0;
  virtual void conv2d_backward_data(const Device& device, const kernels::Conv2dGeometry& g,
                                    const ActivationFormat& format, const float* w, const void* dy, void* dx) = 0;
  virtual void conv2d_backward_weight(const Device& device, const kernels::Conv2dGeometry& g,
                                      const ActivationFormat& format, const void* x, const void* dy, float* dw) = 0;
  // Batch norm over [N, C, S] (core/kernels/batch_norm.h): training forward (batch statistics,
  // running ones updated, mean and inverse std saved), evaluation forward, and the training
  // backward from the saved statistics (dx may be null). Per-channel tensors are f32 [C].
  // With `relu` the forward writes y = max(BN(x), 0): a ReLU that follows, fused in (one pass
  // over the activations instead of two); its backward then takes that y as `relu_output` and
  // lets dy through where y > 0 (null: no ReLU).
  virtual void batch_norm_forward_train(const Device& device, const kernels::BatchNormGeometry& g,
                                        const ActivationFormat& format, const kernels::BatchNormOptions& options,
                                        const void* x, const float* gamma, const float* beta, void* y,
                                        float* saved_mean, float* saved_inv_std, float* running_mean,
                                        float* running_var, bool relu) = 0;
  virtual void batch_norm_forward_eval(const Device& device, const kernels::BatchNormGeometry& g,
                                       const ActivationFormat& format, const kernels::BatchNormOptions& options,
                                       const void* x, const float* gamma, const float* beta,
                                       const float* running_mean, const float* running_var, void* y,
                                       bool relu) = 0;
  virtual void batch_norm_backward(const Device& device, const kernels::BatchNormGeometry& g,
                                   const ActivationFormat& format, const kernels::BatchNormOptions& options,
                                   const void* x, const void* dy, const void* relu_output, const float* gamma,
                                   const float* saved_mean, const float* saved_inv_std, void* dx, float* dgamma,
                                   float* dbeta) = 0;
  // 2-D pooling (max, or average counting padding) and its backward from x, y and dy.
  virtual void pool2d_forward(const Device& device, const kernels::Pool2dGeometry& g,
                              const ActivationFormat& format, bool max, const void* x, void* y) = 0;
  virtual void pool2d_backward(const Device& device, const kernels::Pool2dGeometry& g,
                               const ActivationFormat& format, bool max, const void* x, const void* y,
                               const void* dy, void* dx) = 0;
  // y[N, C] (f32 in every format: the classifier's input) = mean over the S = H*W values of
  // x[N, C, S], and its backward (dy f32 [N, C], dx in `format`).
  virtual void global_avg_pool_forward(const Device& device, const ActivationFormat& format, std::int64_t batch,
                                       std::int64_t channels, std::int64_t spatial, const void* x, float* y) = 0;
  virtual void global_avg_pool_backward(const Device& device, const ActivationFormat& format, std::int64_t batch,
                                        std::int64_t channels, std::int64_t spatial, const float* dy,
                                        void* dx) = 0;
  // Mean softmax cross-entropy of logits [N, C] for labels [N] (i64 on the device), writing
  // dlogits [N, C] of that mean. Waits for the result; DataError naming the first example with
  // a label outside [0, C), as the CPU kernel does.
  virtual double softmax_cross_entropy(const Device& device, std::int64_t batch, std::int64_t classes,
                                       const float* logits, const std::int64_t* labels,
                                       double label_smoothing, float* dlogits) = 0;
  // Multiplies every value of `tensors` (pointer, count) by `factor` and returns the index of the
  // first tensor that held a NaN or an infinity before, or -1: loss scaling's two steps (the
  // loss gradient scaled up, the parameter gradients unscaled and checked). One wait.
  virtual std::int64_t multiply_and_check(const Device& device, std::span<const std::pair<float*, std::int64_t>> tensors,
                                          float factor) = 0;
  // The index of the first of `tensors` (pointer, count) holding a NaN or an infinity, or -1.
  // One wait for all of them (a step checks every gradient this way).
  virtual std::int64_t first_nonfinite(const Device& device,
                                       std::span<const std::pair<const float*, std::int64_t>> tensors) = 0;
  // The sum of the squares of every value of `tensors` (pointer, count), accumulated in double
  // in an order fixed by the counts alone, so workers holding the same gradients get the same
  // bits (gradient clipping by global norm; optim::sum_of_squares on the CPU). One wait.
  virtual double sum_of_squares(const Device& device,
                                std::span<const std::pair<const float*, std::int64_t>> tensors) = 0;
  // Embedding bags (core/kernels/embedding_bag.h) over a batch's unique rows on the device, f32:
  // bag i's pooled row goes to out + i * out_stride (out_stride >= D, so F fields fill their
  // columns of one [N, out_stride] input in place). The backward writes grad_unique_rows [U, D]
  // from grad_out rows at that stride, summing each unique row's bags in the order of the
  // host-built plan (kernels::make_backward_plan: row_start [U + 1], bag_of [P]): no atomics,
  // the CPU kernel's sums. indices, offsets and the plan are i64 device memory.
  virtual void embedding_bag_forward(const Device& device, const kernels::EmbeddingBagGeometry& g,
                                     kernels::BagMode mode, const float* unique_rows,
                                     const std::int64_t* indices, const std::int64_t* offsets, float* out,
                                     std::int64_t out_stride) = 0;
  virtual void embedding_bag_backward(const Device& device, const kernels::EmbeddingBagGeometry& g,
                                      kernels::BagMode mode, const float* grad_out, std::int64_t grad_stride,
                                      const std::int64_t* row_start, const std::int64_t* bag_of,
                                      const std::int64_t* offsets, float* grad_unique_rows) = 0;
  // dst[r, 0 .. width) = src[r, 0 .. width) for r < rows, f32 rows at the given strides (>= width),
  // both in device memory: a block of columns into or out of a wider matrix.
  virtual void copy_columns(const Device& device, std::int64_t rows, std::int64_t width, const float* src,
                            std::int64_t src_stride, float* dst, std::int64_t dst_stride) = 0;
  // table[slots[j], 0 .. dim) = rows[j, 0 .. dim) for j < count: f32 rows, i64 slots (distinct),
  // all in device memory. Rows fetched into a device mirror of a hot-row cache
  // (EmbeddingStore::take_cache_slots).
  virtual void scatter_rows(const Device& device, std::int64_t count, std::int64_t dim, const float* rows,
                            const std::int64_t* slots, float* table) = 0;
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
