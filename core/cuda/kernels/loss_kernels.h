// Internal to core/cuda: the loss kernels' launchers (nvcc-built); losses.cc wraps them with
// the checks, buffers and messages (fmt does not compile under nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace aiacc::cuda::detail {

// per_example[N] and dlogits (may be null); *first_bad lowered to any bad example's index.
void launch_softmax_ce_per_example(std::int64_t batch, std::int64_t classes, const float* logits,
                                   const std::int64_t* labels, double smooth_each, double on_target,
                                   double inv_batch, float* dlogits, double* per_example,
                                   std::uint64_t* first_bad, cudaStream_t stream);
void launch_bce_per_example(std::int64_t batch, const float* logits, const float* targets, double inv_batch,
                            float* dlogits, double* per_example, std::uint64_t* first_bad, cudaStream_t stream);
// *mean = sum of per_example[N] (fixed order) / N.
void launch_mean(const double* per_example, std::int64_t batch, double* mean, cudaStream_t stream);

}  // namespace aiacc::cuda::detail
