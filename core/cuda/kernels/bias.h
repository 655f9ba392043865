// Bias kernels of the GPU linear layer: broadcast-add over rows, and the bias gradient as
// column sums accumulated in double (the CPU's kernels::bias_grad_rows does the same, so large
// batches stay accurate). Pointers are device memory; each launcher queues one kernel on
// `stream` (CudaError on a bad launch). T is float or BFloat16 (the gradient's storage).
// Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/half.h"

namespace aiacc::cuda {

// y[rows, cols] += b[cols]
void launch_add_bias_rows(float* y, const float* b, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream);

// db[cols] = sum over rows of dy[rows, cols] (overwritten)
template <class T>
void launch_bias_grad_rows(const T* dy, float* db, std::int64_t rows, std::int64_t cols,
                           cudaStream_t stream);

}  // namespace aiacc::cuda
