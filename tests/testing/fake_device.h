// A fake accelerator for tests on machines without one: "cuda" tensors in host memory whose
// backend counts what tensors ask of it, and DeviceOps that run the CPU kernels. Layers,
// parameters, the optimiser and the trainer then take their device paths, so the dispatch is
// tested here; the real CUDA ops are tested on a GPU.
// Like a GPU's, the fake's memory cannot be read by host code: its pointers carry a tag bit that
// makes them non-canonical on x86-64, so host code reading a device tensor's data() crashes the
// test instead of passing unnoticed. The backend and the ops strip the tag.
// install_fake_device() registers both for DeviceKind::cuda, once per process.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/kernels/activation.h"
#include "core/kernels/batch_norm.h"
#include "core/kernels/conv2d.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/embedding_bag.h"
#include "core/kernels/linear.h"
#include "core/kernels/losses.h"
#include "core/kernels/pooling.h"
#include <vector>
#include "core/optim/grad_clip.h"
#include "core/optim/loss_scaler.h"
#include "core/tensor.h"
#include "core/util/half.h"

namespace aiacc::testing {

namespace fake_detail {
constexpr std::uintptr_t kTag = std::uintptr_t{1} << 62;
template <class T>
T* tag(T* p) { return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) | kTag); }
template <class T>
T* host(T* p) {  // the memory behind a fake device pointer (host pointers pass unchanged)
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) & ~kTag);
}
}  // namespace fake_detail
using fake_detail::host;

// What the tensors and layers asked of the fake device.
struct FakeDeviceLog {
  int allocations = 0, releases = 0, zeros = 0;
  int to_device = 0, to_host = 0, on_device = 0;  // copies
  int ops = 0;                                    // DeviceOps calls
  int bag_ops = 0;  // of which embedding-bag forwards and backwards, column copies and row scatters
  std::int64_t scattered_rows = 0;  // rows scatter_rows() put into slots
  std::size_t bytes_to_device = 0;  // of the copies to the device
};

class FakeBackend : public DeviceBackend {
 public:
  explicit FakeBackend(FakeDeviceLog& log) : log_(log) {}
  void* allocate(std::size_t bytes, int) override {
    ++log_.allocations;
    return fake_detail::tag(std::malloc(std::max<std::size_t>(bytes, 1)));
  }
  void release(void* ptr, int) noexcept override {
    ++log_.releases;
    std::free(host(ptr));
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) override {
    ++(src_device.is_cpu() ? log_.to_device : dst_device.is_cpu() ? log_.to_host : log_.on_device);
    if (src_device.is_cpu()) log_.bytes_to_device += bytes;
    std::memcpy(host(dst), host(src), bytes);
  }
  void zero(void* dst, int, std::size_t bytes) override {
    ++log_.zeros;
    std::memset(host(dst), 0, bytes);
  }

 private:
  FakeDeviceLog& log_;
};

// Activations [N, C, S] in any ActivationFormat as the f32 NCHW values the CPU kernels take:
// unpack() reads them (bf16 widened, NHWC transposed), pack() writes them back (rounded to bf16
// to nearest even, as the GPU's kernels round). The default format passes through unchanged,
// so f32 NCHW runs are bit-equal to the CPU's and f32 NHWC runs too.
inline std::int64_t nchw_offset(bool channels_last, std::int64_t n, std::int64_t c, std::int64_t s,
                                std::int64_t channels, std::int64_t spatial) {
  return channels_last ? (n * spatial + s) * channels + c : (n * channels + c) * spatial + s;
}

inline std::vector<float> unpack(const ActivationFormat& format, const void* device_ptr, std::int64_t batch,
                                 std::int64_t channels, std::int64_t spatial) {
  std::vector<float> out(static_cast<std::size_t>(batch * channels * spatial));
  const void* p = host(device_ptr);
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t c = 0; c < channels; ++c) {
      for (std::int64_t s = 0; s < spatial; ++s) {
        const std::int64_t from = nchw_offset(format.channels_last, n, c, s, channels, spatial);
        out[static_cast<std::size_t>((n * channels + c) * spatial + s)] =
            format.dtype == DType::bf16  ? to_float(static_cast<const BFloat16*>(p)[from])
            : format.dtype == DType::f16 ? to_float(static_cast<const Half*>(p)[from])
                                         : static_cast<const float*>(p)[from];
      }
    }
  }
  return out;
}

inline void pack(const ActivationFormat& format, const std::vector<float>& values, void* device_ptr,
                 std::int64_t batch, std::int64_t channels, std::int64_t spatial) {
  void* p = host(device_ptr);
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t c = 0; c < channels; ++c) {
      for (std::int64_t s = 0; s < spatial; ++s) {
        const std::int64_t to = nchw_offset(format.channels_last, n, c, s, channels, spatial);
        const float v = values[static_cast<std::size_t>((n * channels + c) * spatial + s)];
        if (format.dtype == DType::bf16) {
          static_cast<BFloat16*>(p)[to] = to_bf16(v);
        } else if (format.dtype == DType::f16) {
          static_cast<Half*>(p)[to] = to_half(v);
        } else {
          static_cast<float*>(p)[to] = v;
        }
      }
    }
  }
}

inline ActivationFormat flat_format(DType dtype) {
  ActivationFormat format;
  format.dtype = dtype;
  return format;
}

// n element-wise values of `dtype` as f32.
struct Flat {
  Flat(DType dtype, const void* p, std::int64_t n) : values(unpack(flat_format(dtype), p, 1, 1, n)) {}
  std::vector<float> values;
};

inline void round_in_place(DType dtype, float* values, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (dtype == DType::bf16) values[i] = to_float(to_bf16(values[i]));
    if (dtype == DType::f16) values[i] = to_float(to_half(values[i]));
  }
}

// A convolution's f32 weight as the GPU uses it for `format` (rounded to bf16 for bf16).
inline std::vector<float> rounded_weight(const ActivationFormat& format, const kernels::Conv2dGeometry& g,
                                         const float* device_w) {
  const float* w = host(device_w);
  std::vector<float> out(w, w + g.out_channels * g.in_channels * g.kernel_h * g.kernel_w);
  round_in_place(format.dtype, out.data(), static_cast<std::int64_t>(out.size()));
  return out;
}

class FakeOps : public DeviceOps {
  template <class... P>
  static void expect_device(const P*... pointers) {
    const bool tagged = ((reinterpret_cast<std::uintptr_t>(pointers) & fake_detail::kTag) && ...);
    AIACC_CHECK(tagged, "fake device: a DeviceOps call got a host pointer");
  }

 public:
  explicit FakeOps(FakeDeviceLog& log) : log_(log) {}
  void linear_forward(const Device&, const kernels::LinearGeometry& g, const float* x, const float* w,
                      const float* b, float* y) override {
    ++log_.ops;
    kernels::linear_forward<float>(g, host(x), host(w), host(b), host(y));
  }
  void linear_backward(const Device&, const kernels::LinearGeometry& g, const float* x, const float* w,
                       const float* dy, float* dx, float* dw, float* db) override {
    ++log_.ops;
    kernels::linear_backward<float>(g, host(x), host(w), host(dy), host(dx), host(dw), host(db));
  }
  void relu_forward(const Device&, DType dtype, std::int64_t n, const void* x, void* y) override {
    ++log_.ops;
    Flat in(dtype, x, n);
    std::vector<float> out(in.values.size());
    kernels::relu_forward<float>(n, in.values.data(), out.data());
    pack(flat_format(dtype), out, y, 1, 1, n);
  }
  void relu_backward(const Device&, DType dtype, std::int64_t n, const void* y, const void* dy, void* dx) override {
    ++log_.ops;
    Flat out(dtype, y, n), grad(dtype, dy, n);
    std::vector<float> result(out.values.size());
    kernels::relu_backward<float>(n, out.values.data(), grad.values.data(), result.data());
    pack(flat_format(dtype), result, dx, 1, 1, n);
  }
  void add(const Device&, DType dtype, std::int64_t n, const void* a, const void* b, void* y) override {
    ++log_.ops;
    Flat fa(dtype, a, n), fb(dtype, b, n);
    std::vector<float> out(fa.values.size());
    kernels::add<float>(n, fa.values.data(), fb.values.data(), out.data());
    pack(flat_format(dtype), out, y, 1, 1, n);
  }
  void add_relu(const Device&, DType dtype, std::int64_t n, const void* a, const void* b, void* y) override {
    ++log_.ops;
    Flat fa(dtype, a, n), fb(dtype, b, n);
    std::vector<float> out(fa.values.size());
    kernels::add_relu_forward<float>(n, fa.values.data(), fb.values.data(), out.data());
    pack(flat_format(dtype), out, y, 1, 1, n);
  }
  void to_activation_format(const Device&, const ActivationFormat& format, std::int64_t batch,
                            std::int64_t channels, std::int64_t spatial, const float* x, void* y) override {
    ++log_.ops;
    const float* in = host(x);
    pack(format, std::vector<float>(in, in + batch * channels * spatial), y, batch, channels, spatial);
  }
  void conv2d_forward(const Device&, const kernels::Conv2dGeometry& g, const ActivationFormat& format,
                      const void* x, const float* w, void* y) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.in_channels, g.height * g.width);
    const std::vector<float> weight = rounded_weight(format, g, w);
    std::vector<float> out(static_cast<std::size_t>(g.batch * g.out_channels * g.out_height() * g.out_width()));
    kernels::conv2d_forward<float>(g, in.data(), weight.data(), nullptr, out.data());
    pack(format, out, y, g.batch, g.out_channels, g.out_height() * g.out_width());
  }
  void conv2d_backward_data(const Device&, const kernels::Conv2dGeometry& g, const ActivationFormat& format,
                            const float* w, const void* dy, void* dx) override {
    ++log_.ops;
    const std::vector<float> grad = unpack(format, dy, g.batch, g.out_channels, g.out_height() * g.out_width());
    const std::vector<float> weight = rounded_weight(format, g, w);
    std::vector<float> out(static_cast<std::size_t>(g.batch * g.in_channels * g.height * g.width));
    kernels::conv2d_backward_data<float>(g, weight.data(), grad.data(), out.data());
    pack(format, out, dx, g.batch, g.in_channels, g.height * g.width);
  }
  void conv2d_backward_weight(const Device&, const kernels::Conv2dGeometry& g, const ActivationFormat& format,
                              const void* x, const void* dy, float* dw) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.in_channels, g.height * g.width);
    const std::vector<float> grad = unpack(format, dy, g.batch, g.out_channels, g.out_height() * g.out_width());
    float* out = host(dw);
    kernels::conv2d_backward_weight<float>(g, in.data(), grad.data(), out);
    // A GPU writes the weight gradient in the activations' dtype, then widens it.
    round_in_place(format.dtype, out, g.out_channels * g.in_channels * g.kernel_h * g.kernel_w);
  }
  void batch_norm_forward_train(const Device&, const kernels::BatchNormGeometry& g, const ActivationFormat& format,
                                const kernels::BatchNormOptions& options, const void* x, const float* gamma,
                                const float* beta, void* y, float* saved_mean, float* saved_inv_std,
                                float* running_mean, float* running_var, bool relu) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.channels, g.spatial);
    std::vector<float> out(in.size());
    kernels::batch_norm_forward_train<float>(g, options, in.data(), host(gamma), host(beta), out.data(),
                                             host(saved_mean), host(saved_inv_std), host(running_mean),
                                             host(running_var));
    if (relu) kernels::relu_forward<float>(static_cast<std::int64_t>(out.size()), out.data(), out.data());
    pack(format, out, y, g.batch, g.channels, g.spatial);
  }
  void batch_norm_forward_eval(const Device&, const kernels::BatchNormGeometry& g, const ActivationFormat& format,
                               const kernels::BatchNormOptions& options, const void* x, const float* gamma,
                               const float* beta, const float* running_mean, const float* running_var,
                               void* y, bool relu) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.channels, g.spatial);
    std::vector<float> out(in.size());
    kernels::batch_norm_forward_eval<float>(g, options, in.data(), host(gamma), host(beta), host(running_mean),
                                            host(running_var), out.data());
    if (relu) kernels::relu_forward<float>(static_cast<std::int64_t>(out.size()), out.data(), out.data());
    pack(format, out, y, g.batch, g.channels, g.spatial);
  }
  void batch_norm_backward(const Device&, const kernels::BatchNormGeometry& g, const ActivationFormat& format,
                           const kernels::BatchNormOptions&, const void* x, const void* dy, const void* relu_output,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std, void* dx,
                           float* dgamma, float* dbeta) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.channels, g.spatial);
    std::vector<float> grad = unpack(format, dy, g.batch, g.channels, g.spatial);
    if (relu_output != nullptr) {  // the fused ReLU's backward first, as the separate layer's
      const std::vector<float> y = unpack(format, relu_output, g.batch, g.channels, g.spatial);
      kernels::relu_backward<float>(static_cast<std::int64_t>(y.size()), y.data(), grad.data(), grad.data());
    }
    std::vector<float> out(in.size());
    kernels::batch_norm_backward<float>(g, kernels::BatchNormStats::batch, in.data(), grad.data(), host(gamma),
                                        host(saved_mean), host(saved_inv_std), out.data(), host(dgamma),
                                        host(dbeta));
    pack(format, out, dx, g.batch, g.channels, g.spatial);
  }
  void pool2d_forward(const Device&, const kernels::Pool2dGeometry& g, const ActivationFormat& format, bool max,
                      const void* x, void* y) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.channels, g.height * g.width);
    const auto outputs = static_cast<std::size_t>(g.batch * g.channels * g.out_height() * g.out_width());
    std::vector<float> out(outputs);
    if (max) {
      std::vector<std::int64_t> argmax(outputs);
      kernels::max_pool2d_forward<float>(g, in.data(), out.data(), argmax.data());
    } else {
      kernels::avg_pool2d_forward<float>(g, in.data(), out.data());
    }
    pack(format, out, y, g.batch, g.channels, g.out_height() * g.out_width());
  }
  void pool2d_backward(const Device&, const kernels::Pool2dGeometry& g, const ActivationFormat& format, bool max,
                       const void* x, const void*, const void* dy, void* dx) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, g.batch, g.channels, g.height * g.width);
    const std::vector<float> grad = unpack(format, dy, g.batch, g.channels, g.out_height() * g.out_width());
    std::vector<float> out(in.size());
    if (max) {
      // The CPU kernel routes by argmax: found again from x, as cuDNN finds it from x and y.
      std::vector<std::int64_t> argmax(grad.size());
      std::vector<float> y(grad.size());
      kernels::max_pool2d_forward<float>(g, in.data(), y.data(), argmax.data());
      kernels::max_pool2d_backward<float>(g, grad.data(), argmax.data(), out.data());
    } else {
      kernels::avg_pool2d_backward<float>(g, grad.data(), out.data());
    }
    pack(format, out, dx, g.batch, g.channels, g.height * g.width);
  }
  void global_avg_pool_forward(const Device&, const ActivationFormat& format, std::int64_t batch,
                               std::int64_t channels, std::int64_t spatial, const void* x, float* y) override {
    ++log_.ops;
    const std::vector<float> in = unpack(format, x, batch, channels, spatial);
    kernels::global_avg_pool_forward<float>(batch, channels, spatial, in.data(), host(y));
  }
  void global_avg_pool_backward(const Device&, const ActivationFormat& format, std::int64_t batch,
                                std::int64_t channels, std::int64_t spatial, const float* dy, void* dx) override {
    ++log_.ops;
    std::vector<float> out(static_cast<std::size_t>(batch * channels * spatial));
    kernels::global_avg_pool_backward<float>(batch, channels, spatial, host(dy), out.data());
    pack(format, out, dx, batch, channels, spatial);
  }
  double softmax_cross_entropy(const Device&, std::int64_t batch, std::int64_t classes, const float* logits,
                               const std::int64_t* labels, double label_smoothing, float* dlogits) override {
    ++log_.ops;
    return kernels::softmax_cross_entropy<float>(batch, classes, host(logits), host(labels), label_smoothing,
                                                 host(dlogits));
  }
  std::int64_t multiply_and_check(const Device&, std::span<const std::pair<float*, std::int64_t>> tensors,
                                  float factor) override {
    ++log_.ops;
    std::int64_t first = -1;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const bool bad = optim::unscale_gradients({host(tensors[t].first), static_cast<std::size_t>(tensors[t].second)},
                                                factor);
      if (bad && first < 0) first = static_cast<std::int64_t>(t);
    }
    return first;
  }
  double sum_of_squares(const Device&, std::span<const std::pair<const float*, std::int64_t>> tensors) override {
    ++log_.ops;
    double total = 0.0;
    for (const auto& [values, count] : tensors) {
      total += optim::sum_of_squares({host(values), static_cast<std::size_t>(count)});
    }
    return total;
  }
  std::int64_t first_nonfinite(const Device&,
                               std::span<const std::pair<const float*, std::int64_t>> tensors) override {
    ++log_.ops;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const float* values = host(tensors[t].first);
      if (!std::all_of(values, values + tensors[t].second, [](float v) { return std::isfinite(v); })) {
        return static_cast<std::int64_t>(t);
      }
    }
    return -1;
  }
  // Like CudaOps these check the strides; the pointers must be device (tagged) memory, so a
  // host buffer handed to them fails here as it would on a GPU.
  void embedding_bag_forward(const Device&, const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                             const float* unique_rows, const std::int64_t* indices, const std::int64_t* offsets,
                             float* out, std::int64_t out_stride) override {
    ++log_.ops;
    ++log_.bag_ops;
    AIACC_CHECK_GE(out_stride, g.dim, "embedding bag: output row stride");
    expect_device(unique_rows, indices, offsets, out);
    kernels::embedding_bag_forward<float>(g, mode, host(unique_rows), host(indices), host(offsets), host(out),
                                          out_stride);
  }
  void embedding_bag_backward(const Device&, const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                              const float* grad_out, std::int64_t grad_stride, const std::int64_t* row_start,
                              const std::int64_t* bag_of, const std::int64_t* offsets,
                              float* grad_unique_rows) override {
    ++log_.ops;
    ++log_.bag_ops;
    AIACC_CHECK_GE(grad_stride, g.dim, "embedding bag: gradient row stride");
    expect_device(grad_out, row_start, bag_of, offsets, grad_unique_rows);
    kernels::embedding_bag_backward_planned<float>(g, mode, host(grad_out), grad_stride, host(row_start),
                                                   host(bag_of), host(offsets), host(grad_unique_rows));
  }
  void copy_columns(const Device&, std::int64_t rows, std::int64_t width, const float* src, std::int64_t src_stride,
                    float* dst, std::int64_t dst_stride) override {
    ++log_.ops;
    ++log_.bag_ops;
    AIACC_CHECK(rows >= 0 && width >= 0 && src_stride >= width && dst_stride >= width,
                "copy_columns: {} rows of {} floats at strides {} and {}", rows, width, src_stride, dst_stride);
    expect_device(src, dst);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(host(dst) + r * dst_stride, host(src) + r * src_stride, static_cast<std::size_t>(width) * sizeof(float));
    }
  }
  void scatter_rows(const Device&, std::int64_t count, std::int64_t dim, const float* rows, const std::int64_t* slots,
                    float* table) override {
    ++log_.ops;
    ++log_.bag_ops;
    log_.scattered_rows += count;
    AIACC_CHECK(count >= 0 && dim >= 0, "scatter_rows: {} rows of {} floats", count, dim);
    expect_device(rows, slots, table);
    for (std::int64_t j = 0; j < count; ++j) {
      std::memcpy(host(table) + host(slots)[j] * dim, host(rows) + j * dim, static_cast<std::size_t>(dim) * sizeof(float));
    }
  }
  void adam_update(const Device&, const optim::AdamRule& rule, float* w, const float* g, float* exp_avg,
                   float* exp_avg_sq, std::int64_t n, std::int64_t step, double lr) override {
    ++log_.ops;
    const auto size = static_cast<std::size_t>(n);
    rule.update({host(w), size}, {host(g), size}, {host(exp_avg), size}, {host(exp_avg_sq), size}, step,
                lr);
  }
  void sgd_update(const Device&, const optim::SgdRule& rule, float* w, const float* g, float* momentum,
                  std::int64_t n, std::int64_t step, double lr) override {
    ++log_.ops;
    const auto size = static_cast<std::size_t>(n);
    rule.update({host(w), size}, {host(g), size}, {host(momentum), momentum != nullptr ? size : 0}, step, lr);
  }

 private:
  FakeDeviceLog& log_;
};

// Registers the fake backend and ops for DeviceKind::cuda (first call only) and returns the
// process's log.
inline FakeDeviceLog& install_fake_device() {
  static FakeDeviceLog log;  // outlives the registrations, which are never undone
  static const bool installed = [] {
    register_device_backend(DeviceKind::cuda, std::make_unique<FakeBackend>(log));
    register_device_ops(DeviceKind::cuda, std::make_unique<FakeOps>(log));
    return true;
  }();
  (void)installed;
  return log;
}

}  // namespace aiacc::testing
