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

#include "core/device_ops.h"
#include "core/kernels/activation.h"
#include "core/kernels/batch_norm.h"
#include "core/kernels/conv2d.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/linear.h"
#include "core/kernels/losses.h"
#include "core/kernels/pooling.h"
#include <vector>
#include "core/tensor.h"

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
    std::memcpy(host(dst), host(src), bytes);
  }
  void zero(void* dst, int, std::size_t bytes) override {
    ++log_.zeros;
    std::memset(host(dst), 0, bytes);
  }

 private:
  FakeDeviceLog& log_;
};

class FakeOps : public DeviceOps {
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
  void relu_forward(const Device&, std::int64_t n, const float* x, float* y) override {
    ++log_.ops;
    kernels::relu_forward<float>(n, host(x), host(y));
  }
  void relu_backward(const Device&, std::int64_t n, const float* y, const float* dy, float* dx) override {
    ++log_.ops;
    kernels::relu_backward<float>(n, host(y), host(dy), host(dx));
  }
  void add(const Device&, std::int64_t n, const float* a, const float* b, float* y) override {
    ++log_.ops;
    kernels::add<float>(n, host(a), host(b), host(y));
  }
  void add_relu(const Device&, std::int64_t n, const float* a, const float* b, float* y) override {
    ++log_.ops;
    kernels::add_relu_forward<float>(n, host(a), host(b), host(y));
  }
  void conv2d_forward(const Device&, const kernels::Conv2dGeometry& g, const float* x, const float* w,
                      float* y) override {
    ++log_.ops;
    kernels::conv2d_forward<float>(g, host(x), host(w), nullptr, host(y));
  }
  void conv2d_backward_data(const Device&, const kernels::Conv2dGeometry& g, const float* w, const float* dy,
                            float* dx) override {
    ++log_.ops;
    kernels::conv2d_backward_data<float>(g, host(w), host(dy), host(dx));
  }
  void conv2d_backward_weight(const Device&, const kernels::Conv2dGeometry& g, const float* x,
                              const float* dy, float* dw) override {
    ++log_.ops;
    kernels::conv2d_backward_weight<float>(g, host(x), host(dy), host(dw));
  }
  void batch_norm_forward_train(const Device&, const kernels::BatchNormGeometry& g,
                                const kernels::BatchNormOptions& options, const float* x, const float* gamma,
                                const float* beta, float* y, float* saved_mean, float* saved_inv_std,
                                float* running_mean, float* running_var) override {
    ++log_.ops;
    kernels::batch_norm_forward_train<float>(g, options, host(x), host(gamma), host(beta), host(y),
                                             host(saved_mean), host(saved_inv_std), host(running_mean),
                                             host(running_var));
  }
  void batch_norm_forward_eval(const Device&, const kernels::BatchNormGeometry& g,
                               const kernels::BatchNormOptions& options, const float* x, const float* gamma,
                               const float* beta, const float* running_mean, const float* running_var,
                               float* y) override {
    ++log_.ops;
    kernels::batch_norm_forward_eval<float>(g, options, host(x), host(gamma), host(beta), host(running_mean),
                                            host(running_var), host(y));
  }
  void batch_norm_backward(const Device&, const kernels::BatchNormGeometry& g, const kernels::BatchNormOptions&,
                           const float* x, const float* dy, const float* gamma, const float* saved_mean,
                           const float* saved_inv_std, float* dx, float* dgamma, float* dbeta) override {
    ++log_.ops;
    kernels::batch_norm_backward<float>(g, kernels::BatchNormStats::batch, host(x), host(dy), host(gamma),
                                        host(saved_mean), host(saved_inv_std), host(dx), host(dgamma),
                                        host(dbeta));
  }
  void pool2d_forward(const Device&, const kernels::Pool2dGeometry& g, bool max, const float* x,
                      float* y) override {
    ++log_.ops;
    if (max) {
      std::vector<std::int64_t> argmax(static_cast<std::size_t>(g.batch * g.channels * g.out_height() * g.out_width()));
      kernels::max_pool2d_forward<float>(g, host(x), host(y), argmax.data());
    } else {
      kernels::avg_pool2d_forward<float>(g, host(x), host(y));
    }
  }
  void pool2d_backward(const Device&, const kernels::Pool2dGeometry& g, bool max, const float* x,
                       const float*, const float* dy, float* dx) override {
    ++log_.ops;
    if (max) {
      // The CPU kernel routes by argmax: found again from x, as cuDNN finds it from x and y.
      const auto outputs = static_cast<std::size_t>(g.batch * g.channels * g.out_height() * g.out_width());
      std::vector<std::int64_t> argmax(outputs);
      std::vector<float> y(outputs);
      kernels::max_pool2d_forward<float>(g, host(x), y.data(), argmax.data());
      kernels::max_pool2d_backward<float>(g, host(dy), argmax.data(), host(dx));
    } else {
      kernels::avg_pool2d_backward<float>(g, host(dy), host(dx));
    }
  }
  void global_avg_pool_forward(const Device&, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                               const float* x, float* y) override {
    ++log_.ops;
    kernels::global_avg_pool_forward<float>(batch, channels, spatial, host(x), host(y));
  }
  void global_avg_pool_backward(const Device&, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                const float* dy, float* dx) override {
    ++log_.ops;
    kernels::global_avg_pool_backward<float>(batch, channels, spatial, host(dy), host(dx));
  }
  double softmax_cross_entropy(const Device&, std::int64_t batch, std::int64_t classes, const float* logits,
                               const std::int64_t* labels, double label_smoothing, float* dlogits) override {
    ++log_.ops;
    return kernels::softmax_cross_entropy<float>(batch, classes, host(logits), host(labels), label_smoothing,
                                                 host(dlogits));
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
