// CudaOps: each DeviceOps call made current on its device and queued on the current stream.
#include "core/cuda/device_ops.h"

#include <map>
#include <memory>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/cuda/kernels/activation.h"
#include "core/cuda/kernels/elementwise.h"
#include "core/cuda/kernels/losses.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/kernels/optimizer_update.h"
#include "core/cuda/kernels/precision.h"
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

CudnnConv2d& conv_for(int device, const kernels::Conv2dGeometry& g) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnConv2d>> cache;
  return cached(cache, {device, g.batch, g.in_channels, g.height, g.width, g.out_channels, g.kernel_h,
                        g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w},
                [&] { return std::make_unique<CudnnConv2d>(g, CudnnConvOptions{}, device); });
}

CudnnBatchNorm2d& batch_norm_for(int device, const kernels::BatchNormGeometry& g,
                                 const kernels::BatchNormOptions& math) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnBatchNorm2d>> cache;
  // [N, C, S] is [N, C, S, 1] to cuDNN: the same NCHW memory. Options are part of the key.
  const auto bits = [](double v) { std::int64_t b; std::memcpy(&b, &v, sizeof b); return b; };
  return cached(cache, {device, g.batch, g.channels, g.spatial, bits(math.momentum), bits(math.eps)}, [&] {
    CudnnBatchNormOptions options;
    options.math = math;
    return std::make_unique<CudnnBatchNorm2d>(g.batch, g.channels, g.spatial, 1, options, device);
  });
}

CudnnPool2d& pool_for(int device, const kernels::Pool2dGeometry& g, bool max) {
  thread_local std::map<std::vector<std::int64_t>, std::unique_ptr<CudnnPool2d>> cache;
  return cached(cache, {device, max ? 1 : 0, g.batch, g.channels, g.height, g.width, g.kernel_h, g.kernel_w,
                        g.stride_h, g.stride_w, g.pad_h, g.pad_w},
                [&] {
                  return std::make_unique<CudnnPool2d>(g, max ? PoolMode::max : PoolMode::average, DType::f32,
                                                       TensorLayout::nchw, device);
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

class CudaOps final : public DeviceOps {
 public:
  void linear_forward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                      const float* w, const float* b, float* y) override {
    DeviceGuard guard(device.index);
    cuda::linear_forward<float>(cublas_for(device.index), g, x, w, b, y, current_stream());
  }
  void linear_backward(const Device& device, const kernels::LinearGeometry& g, const float* x,
                       const float* w, const float* dy, float* dx, float* dw, float* db) override {
    DeviceGuard guard(device.index);
    cuda::linear_backward<float>(cublas_for(device.index), g, x, w, dy, dx, dw, db, current_stream());
  }
  void relu_forward(const Device& device, std::int64_t n, const float* x, float* y) override {
    DeviceGuard guard(device.index);
    launch_relu_forward<float>(x, y, n, current_stream());
  }
  void relu_backward(const Device& device, std::int64_t n, const float* y, const float* dy,
                     float* dx) override {
    DeviceGuard guard(device.index);
    launch_relu_backward<float>(y, dy, dx, n, current_stream());
  }
  void add(const Device& device, std::int64_t n, const float* a, const float* b, float* y) override {
    DeviceGuard guard(device.index);
    launch_add(a, b, y, n, current_stream());
  }
  void add_relu(const Device& device, std::int64_t n, const float* a, const float* b, float* y) override {
    DeviceGuard guard(device.index);
    launch_add_relu(a, b, y, n, current_stream());
  }
#if AIACC_HAVE_CUDNN
  void conv2d_forward(const Device& device, const kernels::Conv2dGeometry& g, const float* x, const float* w,
                      float* y) override {
    DeviceGuard guard(device.index);
    conv_for(device.index, g).forward(cudnn_for(device.index), x, w, y, current_stream());
  }
  void conv2d_backward_data(const Device& device, const kernels::Conv2dGeometry& g, const float* w,
                            const float* dy, float* dx) override {
    DeviceGuard guard(device.index);
    conv_for(device.index, g).backward_data(cudnn_for(device.index), w, dy, dx, current_stream());
  }
  void conv2d_backward_weight(const Device& device, const kernels::Conv2dGeometry& g, const float* x,
                              const float* dy, float* dw) override {
    DeviceGuard guard(device.index);
    conv_for(device.index, g).backward_weight(cudnn_for(device.index), x, dy, dw, current_stream());
  }
  void batch_norm_forward_train(const Device& device, const kernels::BatchNormGeometry& g,
                                const kernels::BatchNormOptions& options, const float* x, const float* gamma,
                                const float* beta, float* y, float* saved_mean, float* saved_inv_std,
                                float* running_mean, float* running_var) override {
    DeviceGuard guard(device.index);
    batch_norm_for(device.index, g, options)
        .forward_train(cudnn_for(device.index), x, gamma, beta, y, running_mean, running_var, saved_mean,
                       saved_inv_std, current_stream());
  }
  void batch_norm_forward_eval(const Device& device, const kernels::BatchNormGeometry& g,
                               const kernels::BatchNormOptions& options, const float* x, const float* gamma,
                               const float* beta, const float* running_mean, const float* running_var,
                               float* y) override {
    DeviceGuard guard(device.index);
    batch_norm_for(device.index, g, options)
        .forward_eval(cudnn_for(device.index), x, gamma, beta, running_mean, running_var, y, current_stream());
  }
  void batch_norm_backward(const Device& device, const kernels::BatchNormGeometry& g,
                           const kernels::BatchNormOptions& options, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std, float* dx,
                           float* dgamma, float* dbeta) override {
    DeviceGuard guard(device.index);
    AIACC_CHECK(dx != nullptr, "batch norm backward on {} computes dx", device.str());
    batch_norm_for(device.index, g, options)
        .backward(cudnn_for(device.index), x, dy, gamma, saved_mean, saved_inv_std, dx, dgamma, dbeta,
                  current_stream());
  }
  void pool2d_forward(const Device& device, const kernels::Pool2dGeometry& g, bool max, const float* x,
                      float* y) override {
    DeviceGuard guard(device.index);
    pool_for(device.index, g, max).forward(cudnn_for(device.index), x, y, current_stream());
  }
  void pool2d_backward(const Device& device, const kernels::Pool2dGeometry& g, bool max, const float* x,
                       const float* y, const float* dy, float* dx) override {
    DeviceGuard guard(device.index);
    pool_for(device.index, g, max).backward(cudnn_for(device.index), x, y, dy, dx, current_stream());
  }
  void global_avg_pool_forward(const Device& device, std::int64_t batch, std::int64_t channels,
                               std::int64_t spatial, const float* x, float* y) override {
    pool2d_forward(device, global_pool_geometry(batch, channels, spatial), false, x, y);
  }
  void global_avg_pool_backward(const Device& device, std::int64_t batch, std::int64_t channels,
                                std::int64_t spatial, const float* dy, float* dx) override {
    DeviceGuard guard(device.index);
    launch_global_avg_pool_backward(dy, dx, batch * channels, spatial, current_stream());
  }
#else
  void conv2d_forward(const Device&, const kernels::Conv2dGeometry&, const float*, const float*, float*) override {
    no_cudnn("a convolution");
  }
  void conv2d_backward_data(const Device&, const kernels::Conv2dGeometry&, const float*, const float*,
                            float*) override {
    no_cudnn("a convolution");
  }
  void conv2d_backward_weight(const Device&, const kernels::Conv2dGeometry&, const float*, const float*,
                              float*) override {
    no_cudnn("a convolution");
  }
  void batch_norm_forward_train(const Device&, const kernels::BatchNormGeometry&, const kernels::BatchNormOptions&,
                                const float*, const float*, const float*, float*, float*, float*, float*,
                                float*) override {
    no_cudnn("batch norm");
  }
  void batch_norm_forward_eval(const Device&, const kernels::BatchNormGeometry&, const kernels::BatchNormOptions&,
                               const float*, const float*, const float*, const float*, const float*,
                               float*) override {
    no_cudnn("batch norm");
  }
  void batch_norm_backward(const Device&, const kernels::BatchNormGeometry&, const kernels::BatchNormOptions&,
                           const float*, const float*, const float*, const float*, const float*, float*, float*,
                           float*) override {
    no_cudnn("batch norm");
  }
  void pool2d_forward(const Device&, const kernels::Pool2dGeometry&, bool, const float*, float*) override {
    no_cudnn("pooling");
  }
  void pool2d_backward(const Device&, const kernels::Pool2dGeometry&, bool, const float*, const float*,
                       const float*, float*) override {
    no_cudnn("pooling");
  }
  void global_avg_pool_forward(const Device&, std::int64_t, std::int64_t, std::int64_t, const float*,
                               float*) override {
    no_cudnn("pooling");
  }
  void global_avg_pool_backward(const Device&, std::int64_t, std::int64_t, std::int64_t, const float*,
                                float*) override {
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
  std::int64_t first_nonfinite(const Device& device,
                               std::span<const std::pair<const float*, std::int64_t>> tensors) override {
    if (tensors.empty()) return -1;
    DeviceGuard guard(device.index);
    const cudaStream_t stream = current_stream();
    // One flag per tensor, all cleared, set and read back together: one wait per step.
    const std::size_t bytes = tensors.size() * sizeof(int);
    memory::PooledBuffer flags(device_allocator(device.index), bytes, stream_id(stream));
    int* flag = static_cast<int*>(flags.get());
    AIACC_CUDA_CHECK(cudaMemsetAsync(flag, 0, bytes, stream));
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      launch_check_finite(tensors[t].first, tensors[t].second, flag + t, stream);
    }
    std::vector<int> found(tensors.size());
    AIACC_CUDA_CHECK(cudaMemcpyAsync(found.data(), flag, bytes, cudaMemcpyDeviceToHost, stream));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t t = 0; t < found.size(); ++t) {
      if (found[t] != 0) return static_cast<std::int64_t>(t);
    }
    return -1;
  }
  void adam_update(const Device& device, const optim::AdamRule& rule, float* w, const float* g,
                   float* exp_avg, float* exp_avg_sq, std::int64_t n, std::int64_t step,
                   double lr) override {
    DeviceGuard guard(device.index);
    launch_adam_update(rule, w, g, exp_avg, exp_avg_sq, n, step, lr, current_stream());
  }
  void sgd_update(const Device& device, const optim::SgdRule& rule, float* w, const float* g,
                  float* momentum, std::int64_t n, std::int64_t step, double lr) override {
    DeviceGuard guard(device.index);
    launch_sgd_update(rule, w, g, momentum, n, step, lr, current_stream());
  }
};

}  // namespace

void register_device_ops() { aiacc::register_device_ops(DeviceKind::cuda, std::make_unique<CudaOps>()); }

}  // namespace aiacc::cuda
