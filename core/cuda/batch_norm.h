// Batch normalisation on the GPU through cuDNN (spatial mode: statistics per channel over
// N, H, W): the math of core/kernels/batch_norm.h, including PyTorch's running-statistic update
// with the unbiased variance, for NCHW or NHWC activations of fp32, bf16 or fp16. The per-channel
// tensors (gamma, beta, running and saved statistics, their gradients) are fp32 [C] in every
// case, as the mixed-precision path keeps them. Built only with cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "core/cuda/cudnn_handle.h"
#include "core/cuda/tensor_layout.h"
#include "core/kernels/batch_norm.h"
#include "core/tensor.h"

namespace aiacc::cuda {

struct CudnnBatchNormOptions {
  DType dtype = DType::f32;  // storage of x, y, dy, dx
  TensorLayout layout = TensorLayout::nchw;
  kernels::BatchNormOptions math;  // momentum, eps (positive)
};

class CudnnBatchNorm2d {
 public:
  // x is [N, C, H, W] (in `layout`); throws ConfigError for a dtype cuDNN refuses or eps <= 0.
  // forward_train throws it for fewer than 2 values per channel (N*H*W), as the CPU kernel does.
  CudnnBatchNorm2d(std::int64_t batch, std::int64_t channels, std::int64_t height, std::int64_t width,
                   CudnnBatchNormOptions options, int device);
  ~CudnnBatchNorm2d();
  CudnnBatchNorm2d(const CudnnBatchNorm2d&) = delete;
  CudnnBatchNorm2d& operator=(const CudnnBatchNorm2d&) = delete;

  // Training: batch statistics; running_mean/var updated in place; save_mean and save_inv_std
  // [C] written for backward.
  void forward_train(const CudnnHandle& cudnn, const void* x, const float* gamma, const float* beta, void* y,
                     float* running_mean, float* running_var, float* save_mean, float* save_inv_std,
                     cudaStream_t stream);
  // Evaluation: normalised with the running statistics.
  void forward_eval(const CudnnHandle& cudnn, const void* x, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, void* y, cudaStream_t stream);
  // Training-mode backward from the saved statistics; dx, dgamma, dbeta overwritten.
  void backward(const CudnnHandle& cudnn, const void* x, const void* dy, const float* gamma,
                const float* save_mean, const float* save_inv_std, void* dx, float* dgamma, float* dbeta,
                cudaStream_t stream);

 private:
  struct Descriptors;
  cudnnBatchNormMode_t training_mode() const;
  CudnnBatchNormOptions options_;
  int device_;
  std::int64_t values_per_channel_ = 0;
  std::unique_ptr<Descriptors> descriptors_;
};

}  // namespace aiacc::cuda
