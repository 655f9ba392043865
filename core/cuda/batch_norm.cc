// CudnnBatchNorm2d: one activation descriptor (x, y, dy, dx share it) and the derived [1, C, 1, 1]
// fp32 descriptor of the per-channel tensors.
#include "core/cuda/batch_norm.h"

#include "core/cuda/detail/cudnn_descriptors.h"
#include "core/cuda/stream.h"

namespace aiacc::cuda {

struct CudnnBatchNorm2d::Descriptors {
  detail::TensorDescriptor activation;
  detail::TensorDescriptor per_channel;
};

namespace {
constexpr const char* kLayer = "cuDNN batch norm";
}  // namespace

CudnnBatchNorm2d::CudnnBatchNorm2d(std::int64_t batch, std::int64_t channels, std::int64_t height,
                                   std::int64_t width, CudnnBatchNormOptions options, int device)
    : options_(options), device_(device) {
  const kernels::BatchNormGeometry geometry{batch, channels, height * width};
  geometry.validate();
  values_per_channel_ = geometry.values_per_channel();
  if (!(options_.math.eps > 0.0) || options_.math.eps < CUDNN_BN_MIN_EPSILON) {
    throw ConfigError(fmt::format("{}: eps {} must be positive (and at least cuDNN's minimum {})", kLayer,
                                  options_.math.eps, CUDNN_BN_MIN_EPSILON));
  }
  const cudnnDataType_t type = detail::cudnn_type(options_.dtype, kLayer);
  DeviceGuard guard(device_);
  descriptors_ = std::make_unique<Descriptors>();
  detail::set_4d(descriptors_->activation, options_.layout, type, batch, channels, height, width, kLayer);
  AIACC_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(descriptors_->per_channel.get(), descriptors_->activation.get(),
                                                  CUDNN_BATCHNORM_SPATIAL));
}

CudnnBatchNorm2d::~CudnnBatchNorm2d() = default;

// cuDNN's plain spatial mode runs NHWC through slow generic kernels (ResNet-50 at batch 256 in
// bf16 on an H100: 48 ms for one backward of [256, 256, 56, 56], a hundred times its memory
// time); the persistent mode has the kernels written for NHWC training.
cudnnBatchNormMode_t CudnnBatchNorm2d::training_mode() const {
  return options_.layout == TensorLayout::nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

void CudnnBatchNorm2d::forward_train(const CudnnHandle& cudnn, const void* x, const float* gamma,
                                     const float* beta, void* y, float* running_mean, float* running_var,
                                     float* save_mean, float* save_inv_std, cudaStream_t stream) {
  // As the CPU kernel: the running variance is unbiased (divides by M - 1). Evaluation has no
  // such limit (a last test batch of one 1x1 image is fine).
  if (values_per_channel_ < 2) {
    throw ConfigError(fmt::format("{}: {} values per channel (N*H*W); training statistics need at least 2",
                                  kLayer, values_per_channel_));
  }
  DeviceGuard guard(device_);
  const float one = 1.0f, zero = 0.0f;
  const Descriptors& d = *descriptors_;
  // cuDNN's running update is running = (1 - factor) running + factor batch: PyTorch's momentum.
  AIACC_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn.on(stream), training_mode(), &one, &zero, d.activation.get(), x, d.activation.get(), y,
      d.per_channel.get(), gamma, beta, options_.math.momentum, running_mean, running_var, options_.math.eps,
      save_mean, save_inv_std));
}

void CudnnBatchNorm2d::forward_eval(const CudnnHandle& cudnn, const void* x, const float* gamma,
                                    const float* beta, const float* running_mean, const float* running_var,
                                    void* y, cudaStream_t stream) {
  DeviceGuard guard(device_);
  const float one = 1.0f, zero = 0.0f;
  const Descriptors& d = *descriptors_;
  AIACC_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn.on(stream), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.activation.get(), x, d.activation.get(), y,
      d.per_channel.get(), gamma, beta, running_mean, running_var, options_.math.eps));
}

void CudnnBatchNorm2d::backward(const CudnnHandle& cudnn, const void* x, const void* dy, const float* gamma,
                                const float* save_mean, const float* save_inv_std, void* dx, float* dgamma,
                                float* dbeta, cudaStream_t stream) {
  DeviceGuard guard(device_);
  const float one = 1.0f, zero = 0.0f;
  const Descriptors& d = *descriptors_;
  AIACC_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cudnn.on(stream), training_mode(), &one, &zero, &one, &zero, d.activation.get(), x,
      d.activation.get(), dy, d.activation.get(), dx, d.per_channel.get(), gamma, dgamma, dbeta,
      options_.math.eps, save_mean, save_inv_std));
}

}  // namespace aiacc::cuda
