// CudaOps: each DeviceOps call made current on its device and queued on the current stream.
#include "core/cuda/device_ops.h"

#include <map>
#include <memory>

#include "core/cuda/kernels/activation.h"
#include "core/cuda/kernels/losses.h"
#include "core/cuda/kernels/optimizer_update.h"
#include "core/cuda/library_handle.h"
#include "core/cuda/linear.h"
#include "core/cuda/stream.h"
#include "core/device_ops.h"

namespace aiacc::cuda {
namespace {

// A cuBLAS handle is not to be shared between threads; each keeps one per device.
const CublasHandle& cublas_for(int device) {
  thread_local std::map<int, CublasHandle> handles;
  auto it = handles.find(device);
  if (it == handles.end()) it = handles.emplace(device, CublasHandle::create()).first;
  return it->second;
}

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
  double softmax_cross_entropy(const Device& device, std::int64_t batch, std::int64_t classes,
                               const float* logits, const std::int64_t* labels,
                               double label_smoothing, float* dlogits) override {
    DeviceGuard guard(device.index);
    const cudaStream_t stream = current_stream();
    const LossOnDevice loss = launch_softmax_cross_entropy(batch, classes, logits, labels, label_smoothing,
                                                           dlogits, device.index, stream);
    return read_loss(loss, stream);
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
