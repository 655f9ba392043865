// CudaOps: each DeviceOps call made current on its device and queued on the current stream.
#include "core/cuda/device_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <memory>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/cuda/kernels/activation.h"
#include "core/cuda/kernels/batch_norm_nhwc.h"
#include "core/cuda/kernels/elementwise.h"
#include "core/cuda/kernels/embedding_bag.h"
#include "core/cuda/kernels/layout.h"
#include "core/cuda/kernels/losses.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/kernels/optimizer_update.h"
#include "core/cuda/kernels/precision.h"
#include "core/cuda/kernels/row_cache.h"
#include "core/cuda/library_handle.h"
#include "core/cuda/linear.h"
#include "core/cuda/stream.h"
#include "core/check.h"
#include "core/device_ops.h"
#include "core/error.h"
#if AIACC_HAVE_CUDNN
#include "core/cuda/batch_norm.h"
#include "core/cuda/conv2d.h"
#include "core/cuda/cudnn_handle.h"
#include "core/cuda/pooling.h"
#endif

namespace aiacc::cuda {
namespace {

// cuBLAS and cuDNN handles are not to be shared between threads; each keeps one per device
// (created under the caller's DeviceGuard).
template <class Handle>
const Handle& handle_for(int device) {
  thread_local std::map<int, Handle> handles;
  auto it = handles.find(device);
  if (it == handles.end()) it = handles.emplace(device, Handle::create()).first;
  return it->second;
}

const CublasHandle& cublas_for(int device) { return handle_for<CublasHandle>(device); }

#if AIACC_HAVE_CUDNN
const CudnnHandle& cudnn_for(int device) { return handle_for<CudnnHandle>(device); }

// cuDNN's descriptors (and a convolution's chosen algorithms) are built once per shape: one
// object per (device, shape) and thread, made on first use.
template <class Op, class Make>
Op& cached(std::map<std::vector<std::int64_t>, std::unique_ptr<Op>>& cache, std::vector<std::int64_t> key,
           Make&& make) {
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), make()).first;
  return *it->second;
}

TensorLayout layout_of(const ActivationFormat& format) {
  return format.channels_last ? TensorLayout::nhwc : TensorLayout::nchw;
}

CudnnConv2d& conv_for(int device, const kernels::Conv2dGeometry& g, const ActivationFormat& format) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnConv2d>> cache;
  return cached(cache, {device, g.batch, g.in_channels, g.height, g.width, g.out_channels, g.kernel_h,
                        g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, static_cast<std::int64_t>(format.dtype),
                        format.channels_last},
                [&] {
                  CudnnConvOptions options;
                  options.dtype = format.dtype;
                  options.layout = layout_of(format);
                  return std::make_unique<CudnnConv2d>(g, options, device);
                });
}

CudnnBatchNorm2d& batch_norm_for(int device, const kernels::BatchNormGeometry& g, const ActivationFormat& format,
                                 const kernels::BatchNormOptions& math) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnBatchNorm2d>> cache;
  // [N, C, S] is [N, C, S, 1] to cuDNN: the same NCHW memory ([N, S, 1, C], the same NHWC
  // memory). Options are part of the key.
  const auto bits = [](double v) { std::int64_t b; std::memcpy(&b, &v, sizeof b); return b; };
  return cached(cache, {device, g.batch, g.channels, g.spatial, bits(math.momentum), bits(math.eps),
                        static_cast<std::int64_t>(format.dtype), format.channels_last}, [&] {
    CudnnBatchNormOptions options;
    options.dtype = format.dtype;
    options.layout = layout_of(format);
    options.math = math;
    return std::make_unique<CudnnBatchNorm2d>(g.batch, g.channels, g.spatial, 1, options, device);
  });
}

CudnnPool2d& pool_for(int device, const kernels::Pool2dGeometry& g, bool max, const ActivationFormat& format) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnPool2d>> cache;
  return cached(cache, {device, max ? 1 : 0, g.batch, g.channels, g.height, g.width, g.kernel_h, g.kernel_w,
                        g.stride_h, g.stride_w, g.pad_h, g.pad_w, static_cast<std::int64_t>(format.dtype),
                        format.channels_last},
                [&] {
                  return std::make_unique<CudnnPool2d>(g, max ? PoolMode::max : PoolMode::average, format.dtype,
                                                       layout_of(format), device);
                });
}

// Global average pooling as an average pool whose window is the whole [S, 1] plane.
kernels::Pool2dGeometry global_pool_geometry(std::int64_t batch, std::int64_t channels, std::int64_t spatial) {
  kernels::Pool2dGeometry g;
  g.batch = batch;
  g.channels = channels;
  g.height = spatial;
  g.width = 1;
  g.kernel_h = spatial;
  g.kernel_w = 1;
  return g;
}
#else
[[noreturn]] void no_cudnn(const char* what) {
  throw Error(fmt::format("{} on a GPU needs cuDNN, and this build has none", what));
}
#endif

// AIACC_PROFILE_OPS=1: every op below waits for the GPU before and after itself, and its time
// is added to a total per (op, shape, format) from its second call on (the first searches
// algorithms), printed largest first to stderr when the process
// exits. For finding the slow kernel of a step; the waits serialise host and GPU, so a step
// under it is slower than without.
class OpProfile {
 public:
  static OpProfile* get() {
    static OpProfile* instance = [] {
      const char* flag = std::getenv("AIACC_PROFILE_OPS");
      return flag != nullptr && std::string(flag) != "0" ? new OpProfile : nullptr;
    }();
    return instance;
  }
  void add(const std::string& key, double seconds) {
    std::lock_guard lock(mutex_);
    // A shape's first call builds descriptors and searches cuDNN's algorithms: not counted.
    if (seen_.insert(key).second) return;
    auto& entry = totals_[key];
    entry.first += seconds;
    entry.second += 1;
  }
  ~OpProfile() = default;

 private:
  OpProfile() { std::atexit([] { get()->print(); }); }
  void print() {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, std::pair<double, long>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double all = 0;
    for (const auto& row : rows) all += row.second.first;
    std::fprintf(stderr, "AIACC_PROFILE_OPS: %.1f ms in %zu kinds of op\n", all * 1e3, rows.size());
    for (const auto& [key, total] : rows) {
      std::fprintf(stderr, "%10.2f ms %6ld calls %6.1f%%  %s\n", total.first * 1e3, total.second,
                   100.0 * total.first / std::max(all, 1e-12), key.c_str());
    }
  }
  std::mutex mutex_;
  std::map<std::string, std::pair<double, long>> totals_;
  std::set<std::string> seen_;
};

class ProfileScope {
 public:
  template <class Describe>
  ProfileScope(const char* op, Describe&& describe) : profile_(OpProfile::get()) {
    if (profile_ == nullptr) return;
    key_ = fmt::format("{} {}", op, describe());
    AIACC_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    start_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (profile_ == nullptr) return;
    (void)cudaStreamSynchronize(current_stream());
    profile_->add(key_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  OpProfile* profile_;
  std::string key_;
  std::chrono::steady_clock::time_point start_;
};

std::string conv_key(const kernels::Conv2dGeometry& g, const ActivationFormat& f) {
  return fmt::format("N{} C{} {}x{} O{} k{} s{} {}", g.batch, g.in_channels, g.height, g.width, g.out_channels,
                     g.kernel_h, g.stride_h, f.str());
}
std::string nchw_key(std::int64_t n, std::int64_t c, std::int64_t s, const ActivationFormat& f) {
  return fmt::format("N{} C{} S{} {}", n, c, s, f.str());
}

// Calls fn(T{}) with T the storage type of `dtype`: float, BFloat16 or Half; ConfigError for
// others (`what` names the caller).
template <class Fn>
void with_storage(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(float{}); return;
    case DType::bf16: fn(BFloat16{}); return;
    case DType::f16: fn(Half{}); return;
    default: throw ConfigError(fmt::format("{} of {} on a GPU: f32, bf16 or f16", what, dtype_name(dtype)));
  }
}

// The formats this backend runs: f32, bf16 or f16, either layout.
void check_format(const ActivationFormat& format) {
  with_storage(format.dtype, "activations", [](auto) {});
}

// Values of `dtype` in a pooled buffer on `stream`.
memory::PooledBuffer scratch(int device, DType dtype, std::int64_t count, cudaStream_t stream) {
  return memory::PooledBuffer(device_allocator(device), static_cast<std::size_t>(count) * dtype_size(dtype),
                              stream_id(stream));
}

// out = in over [N, C, S] values, from one format to another; one side is f32.
void convert(const void* in, const ActivationFormat& from, void* out, const ActivationFormat& to, std::int64_t n,
             std::int64_t c, std::int64_t s, cudaStream_t stream) {
  if (from.dtype == DType::f32) {
    with_storage(to.dtype, "a conversion", [&](auto tag) {
      using T = decltype(tag);
      launch_convert_layout(static_cast<const float*>(in), from.channels_last, static_cast<T*>(out), to.channels_last,
                            n, c, s, stream);
    });
  } else if (to.dtype == DType::f32) {
    with_storage(from.dtype, "a conversion", [&](auto tag) {
      using T = decltype(tag);
      launch_convert_layout(static_cast<const T*>(in), from.channels_last, static_cast<float*>(out), to.channels_last,
                            n, c, s, stream);
    });
  } else {
    throw InternalError(fmt::format("no GPU conversion from {} to {}", from.str(), to.str()));
  }
}

// The residual joins per storage type.
void launch_join(bool relu, const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream) {
  relu ? launch_add_relu(a, b, y, n, stream) : launch_add(a, b, y, n, stream);
}
void launch_join(bool relu, const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t n, cudaStream_t stream) {
  relu ? launch_add_relu_bf16(a, b, y, n, stream) : launch_add_bf16(a, b, y, n, stream);
}
void launch_join(bool relu, const Half* a, const Half* b, Half* y, std::int64_t n, cudaStream_t stream) {
  relu ? launch_add_relu_f16(a, b, y, n, stream) : launch_add_f16(a, b, y, n, stream);
}

#if AIACC_HAVE_CUDNN
// A convolution's f32 weight [O, C, KH, KW] as cuDNN takes it in `format` ([O, KH, KW, C] when
// channels last, bf16 for bf16 activations): itself, or a converted copy kept in `held` until
// the stream's work is queued (the allocator orders reuse after it).
const void* weight_for(const kernels::Conv2dGeometry& g, const ActivationFormat& format, const float* w,
                       int device, cudaStream_t stream, memory::PooledBuffer& held) {
  if (format.is_default()) return w;
  const std::int64_t taps = g.kernel_h * g.kernel_w;
  held = scratch(device, format.dtype, g.out_channels * g.in_channels * taps, stream);
  convert(w, ActivationFormat{}, held.get(), format, g.out_channels, g.in_channels, taps, stream);
  return held.get();
}
#endif

class CudaOps final : public DeviceOps {
  // One flag per tensor, all cleared, set by launch(t, flag, stream) and read back together:
  // the index of the first tensor flagged, or -1, for one wait per step.
  template <class Launch>
  static std::int64_t first_flagged(const Device& device, std::size_t count, Launch&& launch) {
    if (count == 0) return -1;
    DeviceGuard guard(device.index);
    const cudaStream_t stream = current_stream();
    const std::size_t bytes = count * sizeof(int);
    memory::PooledBuffer flags(device_allocator(device.index), bytes, stream_id(stream));
    int* flag = static_cast<int*>(flags.get());
    AIACC_CUDA_CHECK(cudaMemsetAsync(flag, 0, bytes, stream));
    for (std::size_t t = 0; t < count; ++t) launch(t, flag + t, stream);
    std::vector<int> found(count);
    AIACC_CUDA_CHECK(cudaMemcpyAsync(found.data(), flag, bytes, cudaMemcpyDeviceToHost, stream));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t t = 0; t < count; ++t) {
      if (found[t] != 0) return static_cast<std::int64_t>(t);
    }
    return -1;
  }

  // y = max(y, 0) over a batch norm's output (cuDNN's path fuses no ReLU).
  void relu_in_place(DType dtype, const kernels::BatchNormGeometry& g, void* y) {
    with_storage(dtype, "relu", [&](auto tag) {
      using T = decltype(tag);
      launch_relu_forward(static_cast<const T*>(y), static_cast<T*>(y), g.batch * g.channels * g.spatial,
                          current_stream());
    });
  }

  // The per-channel scratch of our channels-last batch norm kernels.
  static memory::PooledBuffer batch_norm_scratch(const Device& device, const kernels::BatchNormGeometry& g,
                                                 cudaStream_t stream) {
    return memory::PooledBuffer(device_allocator(device.index), batch_norm_nhwc_scratch_bytes(g.channels),
                                stream_id(stream));
  }

  void join(const Device& device, DType dtype, bool relu, std::int64_t n, const void* a, const void* b, void* y) {
    DeviceGuard guard(device.index);
    ProfileScope scope(relu ? "add relu" : "add", [&] { return fmt::format("{} {}", n, dtype_name(dtype)); });
    with_storage(dtype, "add", [&](auto tag) {
      using T = decltype(tag);
      launch_join(relu, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, current_stream());
    });
  }

 public:
  void linear_forward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                      const float* w, const float* b, float* y) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("linear fwd", [&] { return fmt::format("{}x{}x{}", g.batch, g.in_features, g.out_features); });
    cuda::linear_forward<float>(cublas_for(device.index), g, x, w, b, y, current_stream());
  }
  void linear_backward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                       const float* w, const float* dy, float* dx, float* dw, float* db) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("linear bwd", [&] { return fmt::format("{}x{}x{}", g.batch, g.in_features, g.out_features); });
    cuda::linear_backward<float>(cublas_for(device.index), g, x, w, dy, dx, dw, db, current_stream());
  }
  void relu_forward(const Device& device, DType dtype, std::int64_t n, const void* x, void* y) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("relu fwd", [&] { return fmt::format("{} {}", n, dtype_name(dtype)); });
    with_storage(dtype, "relu", [&](auto tag) {
      using T = decltype(tag);
      launch_relu_forward(static_cast<const T*>(x), static_cast<T*>(y), n, current_stream());
    });
  }
  void relu_backward(const Device& device, DType dtype, std::int64_t n, const void* y, const void* dy,
                     void* dx) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("relu bwd", [&] { return fmt::format("{} {}", n, dtype_name(dtype)); });
    with_storage(dtype, "relu", [&](auto tag) {
      using T = decltype(tag);
      launch_relu_backward(static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), n,
                           current_stream());
    });
  }
  void add(const Device& device, DType dtype, std::int64_t n, const void* a, const void* b, void* y) override {
    join(device, dtype, false, n, a, b, y);
  }
  void add_relu(const Device& device, DType dtype, std::int64_t n, const void* a, const void* b,
                void* y) override {
    join(device, dtype, true, n, a, b, y);
  }
  void to_activation_format(const Device& device, const ActivationFormat& format, std::int64_t batch,
                            std::int64_t channels, std::int64_t spatial, const float* x, void* y) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("to format", [&] { return nchw_key(batch, channels, spatial, format); });
    convert(x, ActivationFormat{}, y, format, batch, channels, spatial, current_stream());
  }
#if AIACC_HAVE_CUDNN
  void conv2d_forward(const Device& device, const kernels::Conv2dGeometry& g, const ActivationFormat& format,
                      const void* x, const float* w, void* y) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("conv fwd", [&] { return conv_key(g, format); });
    const cudaStream_t stream = current_stream();
    memory::PooledBuffer held;
    const void* weight = weight_for(g, format, w, device.index, stream, held);
    conv_for(device.index, g, format).forward(cudnn_for(device.index), x, weight, y, stream);
  }
  void conv2d_backward_data(const Device& device, const kernels::Conv2dGeometry& g, const ActivationFormat& format,
                            const float* w, const void* dy, void* dx) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("conv bwd data", [&] { return conv_key(g, format); });
    const cudaStream_t stream = current_stream();
    memory::PooledBuffer held;
    const void* weight = weight_for(g, format, w, device.index, stream, held);
    conv_for(device.index, g, format).backward_data(cudnn_for(device.index), weight, dy, dx, stream);
  }
  void conv2d_backward_weight(const Device& device, const kernels::Conv2dGeometry& g,
                              const ActivationFormat& format, const void* x, const void* dy, float* dw) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("conv bwd weight", [&] { return conv_key(g, format); });
    const cudaStream_t stream = current_stream();
    CudnnConv2d& conv = conv_for(device.index, g, format);
    if (format.is_default()) {
      conv.backward_weight(cudnn_for(device.index), x, dy, dw, stream);
      return;
    }
    // cuDNN writes dw in the activations' dtype and layout; the f32 gradient is converted back.
    const std::int64_t taps = g.kernel_h * g.kernel_w;
    memory::PooledBuffer grad = scratch(device.index, format.dtype, g.out_channels * g.in_channels * taps, stream);
    conv.backward_weight(cudnn_for(device.index), x, dy, grad.get(), stream);
    convert(grad.get(), format, dw, ActivationFormat{}, g.out_channels, g.in_channels, taps, stream);
  }
  void batch_norm_forward_train(const Device& device, const kernels::BatchNormGeometry& g,
                                const ActivationFormat& format, const kernels::BatchNormOptions& options,
                                const void* x, const float* gamma, const float* beta, void* y, float* saved_mean,
                                float* saved_inv_std, float* running_mean, float* running_var, bool relu) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("bn fwd train", [&] { return nchw_key(g.batch, g.channels, g.spatial, format); });
    if (format.channels_last) {
      const std::int64_t rows = g.batch * g.spatial;
      if (rows < 2) {
        throw ConfigError(fmt::format("batch norm: {} values per channel (N*H*W); training statistics need at "
                                      "least 2", rows));
      }
      const cudaStream_t stream = current_stream();
      memory::PooledBuffer scratch = batch_norm_scratch(device, g, stream);
      with_storage(format.dtype, "batch norm", [&](auto tag) {
        using T = decltype(tag);
        launch_batch_norm_nhwc_forward_train(static_cast<const T*>(x), gamma, beta, static_cast<T*>(y), running_mean,
                                             running_var, saved_mean, saved_inv_std, rows, g.channels, options, relu,
                                             scratch.get(), stream);
      });
      return;
    }
    batch_norm_for(device.index, g, format, options)
        .forward_train(cudnn_for(device.index), x, gamma, beta, y, running_mean, running_var, saved_mean,
                       saved_inv_std, current_stream());
    if (relu) relu_in_place(format.dtype, g, y);
  }
  void batch_norm_forward_eval(const Device& device, const kernels::BatchNormGeometry& g,
                               const ActivationFormat& format, const kernels::BatchNormOptions& options,
                               const void* x, const float* gamma, const float* beta, const float* running_mean,
                               const float* running_var, void* y, bool relu) override {
    check_format(format);
    DeviceGuard guard(device.index);
    if (format.channels_last) {
      const cudaStream_t stream = current_stream();
      memory::PooledBuffer scratch = batch_norm_scratch(device, g, stream);
      const std::int64_t rows = g.batch * g.spatial;
      with_storage(format.dtype, "batch norm", [&](auto tag) {
        using T = decltype(tag);
        launch_batch_norm_nhwc_forward_eval(static_cast<const T*>(x), gamma, beta, running_mean, running_var,
                                            static_cast<T*>(y), rows, g.channels, options, relu, scratch.get(),
                                            stream);
      });
      return;
    }
    batch_norm_for(device.index, g, format, options)
        .forward_eval(cudnn_for(device.index), x, gamma, beta, running_mean, running_var, y, current_stream());
    if (relu) relu_in_place(format.dtype, g, y);
  }
  void batch_norm_backward(const Device& device, const kernels::BatchNormGeometry& g, const ActivationFormat& format,
                           const kernels::BatchNormOptions& options, const void* x, const void* dy,
                           const void* relu_output, const float* gamma, const float* saved_mean,
                           const float* saved_inv_std, void* dx, float* dgamma, float* dbeta) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("bn bwd", [&] { return nchw_key(g.batch, g.channels, g.spatial, format); });
    AIACC_CHECK(dx != nullptr, "batch norm backward on {} computes dx", device.str());
    if (format.channels_last) {
      const cudaStream_t stream = current_stream();
      memory::PooledBuffer scratch = batch_norm_scratch(device, g, stream);
      const std::int64_t rows = g.batch * g.spatial;
      with_storage(format.dtype, "batch norm", [&](auto tag) {
        using T = decltype(tag);
        launch_batch_norm_nhwc_backward(static_cast<const T*>(x), static_cast<const T*>(dy),
                                        static_cast<const T*>(relu_output), gamma, saved_mean, saved_inv_std,
                                        static_cast<T*>(dx), dgamma, dbeta, rows, g.channels, scratch.get(), stream);
      });
      return;
    }
    // cuDNN's batch norm has no ReLU: the fused one's mask goes on dy first.
    memory::PooledBuffer masked;
    if (relu_output != nullptr) {
      const std::int64_t n = g.batch * g.channels * g.spatial;
      masked = scratch(device.index, format.dtype, n, current_stream());
      relu_backward(device, format.dtype, n, relu_output, dy, masked.get());
      dy = masked.get();
    }
    batch_norm_for(device.index, g, format, options)
        .backward(cudnn_for(device.index), x, dy, gamma, saved_mean, saved_inv_std, dx, dgamma, dbeta,
                  current_stream());
  }
  void pool2d_forward(const Device& device, const kernels::Pool2dGeometry& g, const ActivationFormat& format,
                      bool max, const void* x, void* y) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("pool fwd", [&] { return nchw_key(g.batch, g.channels, g.height * g.width, format); });
    pool_for(device.index, g, max, format).forward(cudnn_for(device.index), x, y, current_stream());
  }
  void pool2d_backward(const Device& device, const kernels::Pool2dGeometry& g, const ActivationFormat& format,
                       bool max, const void* x, const void* y, const void* dy, void* dx) override {
    check_format(format);
    DeviceGuard guard(device.index);
    ProfileScope scope("pool bwd", [&] { return nchw_key(g.batch, g.channels, g.height * g.width, format); });
    pool_for(device.index, g, max, format).backward(cudnn_for(device.index), x, y, dy, dx, current_stream());
  }
  void global_avg_pool_forward(const Device& device, const ActivationFormat& format, std::int64_t batch,
                               std::int64_t channels, std::int64_t spatial, const void* x, float* y) override {
    check_format(format);
    if (format.is_default()) {
      pool2d_forward(device, global_pool_geometry(batch, channels, spatial), format, false, x, y);
      return;
    }
    DeviceGuard guard(device.index);
    with_storage(format.dtype, "global pooling", [&](auto tag) {
      using T = decltype(tag);
      launch_global_avg_pool_forward(static_cast<const T*>(x), format.channels_last, y, batch, channels, spatial,
                                     current_stream());
    });
  }
  void global_avg_pool_backward(const Device& device, const ActivationFormat& format, std::int64_t batch,
                                std::int64_t channels, std::int64_t spatial, const float* dy, void* dx) override {
    check_format(format);
    DeviceGuard guard(device.index);
    if (format.is_default()) {
      launch_global_avg_pool_backward(dy, static_cast<float*>(dx), batch * channels, spatial, current_stream());
      return;
    }
    with_storage(format.dtype, "global pooling", [&](auto tag) {
      using T = decltype(tag);
      launch_global_avg_pool_backward_any(dy, static_cast<T*>(dx), format.channels_last, batch, channels, spatial,
                                          current_stream());
    });
  }
#else
  void conv2d_forward(const Device&, const kernels::Conv2dGeometry&, const ActivationFormat&, const void*,
                      const float*, void*) override {
    no_cudnn("a convolution");
  }
  void conv2d_backward_data(const Device&, const kernels::Conv2dGeometry&, const ActivationFormat&, const float*,
                            const void*, void*) override {
    no_cudnn("a convolution");
  }
  void conv2d_backward_weight(const Device&, const kernels::Conv2dGeometry&, const ActivationFormat&, const void*,
                              const void*, float*) override {
    no_cudnn("a convolution");
  }
  void batch_norm_forward_train(const Device&, const kernels::BatchNormGeometry&, const ActivationFormat&,
                                const kernels::BatchNormOptions&, const void*, const float*, const float*, void*,
                                float*, float*, float*, float*, bool) override {
    no_cudnn("batch norm");
  }
  void batch_norm_forward_eval(const Device&, const kernels::BatchNormGeometry&, const ActivationFormat&,
                               const kernels::BatchNormOptions&, const void*, const float*, const float*,
                               const float*, const float*, void*, bool) override {
    no_cudnn("batch norm");
  }
  void batch_norm_backward(const Device&, const kernels::BatchNormGeometry&, const ActivationFormat&,
                           const kernels::BatchNormOptions&, const void*, const void*, const void*, const float*,
                           const float*, const float*, void*, float*, float*) override {
    no_cudnn("batch norm");
  }
  void pool2d_forward(const Device&, const kernels::Pool2dGeometry&, const ActivationFormat&, bool, const void*,
                      void*) override {
    no_cudnn("pooling");
  }
  void pool2d_backward(const Device&, const kernels::Pool2dGeometry&, const ActivationFormat&, bool, const void*,
                       const void*, const void*, void*) override {
    no_cudnn("pooling");
  }
  void global_avg_pool_forward(const Device&, const ActivationFormat&, std::int64_t, std::int64_t, std::int64_t,
                               const void*, float*) override {
    no_cudnn("pooling");
  }
  void global_avg_pool_backward(const Device&, const ActivationFormat&, std::int64_t, std::int64_t, std::int64_t,
                                const float*, void*) override {
    no_cudnn("pooling");
  }
#endif
  double softmax_cross_entropy(const Device& device, std::int64_t batch, std::int64_t classes,
                               const float* logits, const std::int64_t* labels,
                               double label_smoothing, float* dlogits) override {
    DeviceGuard guard(device.index);
    const cudaStream_t stream = current_stream();
    const LossOnDevice loss = launch_softmax_cross_entropy(batch, classes, logits, labels, label_smoothing,
                                                           dlogits, device.index, stream);
    return read_loss(loss, stream);
  }
  std::int64_t multiply_and_check(const Device& device, std::span<const std::pair<float*, std::int64_t>> tensors,
                                  float factor) override {
    return first_flagged(device, tensors.size(), [&](std::size_t t, int* flag, cudaStream_t stream) {
      launch_unscale_and_check(tensors[t].first, tensors[t].second, factor, flag, stream);
    });
  }
  double sum_of_squares(const Device& device,
                        std::span<const std::pair<const float*, std::int64_t>> tensors) override {
    if (tensors.empty()) return 0.0;
    DeviceGuard guard(device.index);
    const cudaStream_t stream = current_stream();
    std::vector<std::size_t> first(tensors.size() + 1, 0);
    for (std::size_t t = 0; t < tensors.size(); ++t) first[t + 1] = first[t] + sum_squares_blocks(tensors[t].second);
    memory::PooledBuffer partials(device_allocator(device.index), first.back() * sizeof(double), stream_id(stream));
    double* partial = static_cast<double*>(partials.get());
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      launch_sum_squares(tensors[t].first, tensors[t].second, partial + first[t], stream);
    }
    std::vector<double> host(first.back());
    AIACC_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial, host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                     stream));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
    double total = 0.0;
    for (double p : host) total += p;
    return total;
  }
  std::int64_t first_nonfinite(const Device& device,
                               std::span<const std::pair<const float*, std::int64_t>> tensors) override {
    return first_flagged(device, tensors.size(), [&](std::size_t t, int* flag, cudaStream_t stream) {
      launch_check_finite(tensors[t].first, tensors[t].second, flag, stream);
    });
  }
  void embedding_bag_forward(const Device& device, const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                             const float* unique_rows, const std::int64_t* indices, const std::int64_t* offsets,
                             float* out, std::int64_t out_stride) override {
    AIACC_CHECK_GE(out_stride, g.dim, "embedding bag: output row stride");
    DeviceGuard guard(device.index);
    ProfileScope scope("bag fwd", [&] { return fmt::format("dim {}", g.dim); });  // U varies by batch
    launch_embedding_bag_forward(g, mode, unique_rows, indices, offsets, out, out_stride, current_stream());
  }
  void embedding_bag_backward(const Device& device, const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                              const float* grad_out, std::int64_t grad_stride, const std::int64_t* row_start,
                              const std::int64_t* bag_of, const std::int64_t* offsets,
                              float* grad_unique_rows) override {
    AIACC_CHECK_GE(grad_stride, g.dim, "embedding bag: gradient row stride");
    DeviceGuard guard(device.index);
    ProfileScope scope("bag bwd", [&] { return fmt::format("dim {}", g.dim); });
    launch_embedding_bag_backward(g, mode, grad_out, grad_stride, row_start, bag_of, offsets, grad_unique_rows,
                                  current_stream());
  }
  void copy_columns(const Device& device, std::int64_t rows, std::int64_t width, const float* src,
                    std::int64_t src_stride, float* dst, std::int64_t dst_stride) override {
    AIACC_CHECK(rows >= 0 && width >= 0 && src_stride >= width && dst_stride >= width,
                "copy_columns: {} rows of {} floats at strides {} and {}", rows, width, src_stride, dst_stride);
    if (rows == 0 || width == 0) return;
    DeviceGuard guard(device.index);
    constexpr auto f = sizeof(float);
    AIACC_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_stride) * f, src,
                                       static_cast<std::size_t>(src_stride) * f, static_cast<std::size_t>(width) * f,
                                       static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, current_stream()));
  }
  void scatter_rows(const Device& device, std::int64_t count, std::int64_t dim, const float* rows,
                    const std::int64_t* slots, float* table) override {
    AIACC_CHECK(count >= 0 && dim >= 0, "scatter_rows: {} rows of {} floats", count, dim);
    if (count == 0 || dim == 0) return;
    DeviceGuard guard(device.index);
    ProfileScope scope("row scatter", [&] { return fmt::format("dim {}", dim); });
    launch_scatter_to_slots(rows, slots, count, dim, table, current_stream());
  }
  void adam_update(const Device& device, const optim::AdamRule& rule, float* w, const float* g,
                   float* exp_avg, float* exp_avg_sq, std::int64_t n, std::int64_t step,
                   double lr) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("adam", [&] { return std::string("all"); });
    launch_adam_update(rule, w, g, exp_avg, exp_avg_sq, n, step, lr, current_stream());
  }
  void sgd_update(const Device& device, const optim::SgdRule& rule, float* w, const float* g,
                  float* momentum, std::int64_t n, std::int64_t step, double lr) override {
    DeviceGuard guard(device.index);
    ProfileScope scope("sgd", [&] { return std::string("all"); });
    launch_sgd_update(rule, w, g, momentum, n, step, lr, current_stream());
  }
};

}  // namespace

void register_device_ops() { aiacc::register_device_ops(DeviceKind::cuda, std::make_unique<CudaOps>()); }

}  // namespace aiacc::cuda
