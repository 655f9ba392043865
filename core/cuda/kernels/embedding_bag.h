// Embedding bag on the GPU: the forward and backward of core/kernels/embedding_bag.h over
// device memory, with the same sums in the same order (the backward walks the CPU-built
// EmbeddingBagBackwardPlan, copied to the device), so no atomics and no run-to-run noise.
// Legend as there: N bags, P positions, U unique rows, D row dim. All pointers are device
// memory; each launcher queues one kernel on `stream` (CudaError on a bad launch). The caller
// validates the bags on the host (make_backward_plan does; the forward trusts its inputs) and
// the strides (>= D; CudaOps checks them).
// Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/embedding_bag.h"

namespace aiacc::cuda {

// out[N, D] from unique_rows[U, D], indices[P], offsets[N + 1]; bag i's row at
// out + i * out_stride (out_stride >= D: one field's columns of a wider [N, out_stride] matrix,
// such as a model's concatenated input).
void launch_embedding_bag_forward(const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                                  const float* unique_rows, const std::int64_t* indices,
                                  const std::int64_t* offsets, float* out, std::int64_t out_stride,
                                  cudaStream_t stream);

// grad_unique_rows[U, D] from grad_out[N, D] (bag i's row at grad_out + i * grad_stride);
// row_start[U + 1] and bag_of[P] are the plan's arrays on the device, offsets[N + 1] the bags'
// (for mean's bag sizes).
void launch_embedding_bag_backward(const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                                   const float* grad_out, std::int64_t grad_stride,
                                   const std::int64_t* row_start, const std::int64_t* bag_of,
                                   const std::int64_t* offsets, float* grad_unique_rows, cudaStream_t stream);

}  // namespace aiacc::cuda
