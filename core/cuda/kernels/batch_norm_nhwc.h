// Batch normalisation of channels-last activations x [M, C] (M = N*H*W rows) on the GPU, f32 or
// bf16 storage with f32 statistics and fp32/fp64 accumulation: core/kernels/batch_norm.h's
// math (biased variance to normalise, unbiased for the running update, PyTorch's momentum).
// cuDNN's NHWC batch norm runs bf16 through generic kernels at a small fraction of memory speed
// (ResNet-50, batch 256, H100: 37 ms for one backward of [256, 256, 56, 56]); these read x (and
// dy) once per reduction and once per element-wise pass. Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/batch_norm.h"

namespace aiacc::cuda {

// Per-channel scratch the launchers need: 4*C doubles (accumulators) and 2*C floats.
std::size_t batch_norm_nhwc_scratch_bytes(std::int64_t channels);

// Training forward: batch statistics, running ones updated in place, save_mean/save_inv_std [C]
// written, y = gamma (x - mean) inv_std + beta (then max(y, 0) with `relu`, a following ReLU
// fused in). T is float, BFloat16 or Half.
template <class T>
void launch_batch_norm_nhwc_forward_train(const T* x, const float* gamma, const float* beta, T* y,
                                          float* running_mean, float* running_var, float* save_mean,
                                          float* save_inv_std, std::int64_t rows, std::int64_t channels,
                                          const kernels::BatchNormOptions& options, bool relu, void* scratch,
                                          cudaStream_t stream);
// Evaluation: normalised with the running statistics.
template <class T>
void launch_batch_norm_nhwc_forward_eval(const T* x, const float* gamma, const float* beta,
                                         const float* running_mean, const float* running_var, T* y,
                                         std::int64_t rows, std::int64_t channels,
                                         const kernels::BatchNormOptions& options, bool relu, void* scratch,
                                         cudaStream_t stream);
// Training backward from the saved statistics: dx, dgamma, dbeta overwritten. With a fused
// ReLU, relu_output is the forward's y and dy counts only where it is positive (else null).
template <class T>
void launch_batch_norm_nhwc_backward(const T* x, const T* dy, const T* relu_output, const float* gamma,
                                     const float* save_mean, const float* save_inv_std, T* dx, float* dgamma,
                                     float* dbeta, std::int64_t rows, std::int64_t channels, void* scratch,
                                     cudaStream_t stream);

}  // namespace aiacc::cuda
