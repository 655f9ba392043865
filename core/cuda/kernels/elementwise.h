// Element-wise joins on the GPU, and global average pooling's backward, core/kernels/elementwise.h's rules for fp32: y = a + b, and the
// residual join y = max(a + b, 0) (a NaN sum stays NaN). y may equal a or b. Each launcher
// queues one kernel on `stream`. Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace aiacc::cuda {

void launch_add(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream);
void launch_add_relu(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream);
// Global average pooling's backward: dx[p, s] = dy[p] * (1 / spatial) over `planes` planes of
// `spatial` values (core/kernels/pooling.h's arithmetic, so bit-equal to the CPU).
void launch_global_avg_pool_backward(const float* dy, float* dx, std::int64_t planes, std::int64_t spatial,
                                     cudaStream_t stream);

}  // namespace aiacc::cuda
