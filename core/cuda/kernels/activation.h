// ReLU on the GPU: core/kernels/activation.h's forward (NaN stays NaN) and backward (gradient
// where the output is positive, 0 at exactly 0), for fp32 or bf16 storage. In place is allowed
// (y == x, dx == dy). Each launcher queues one kernel on `stream`. Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/half.h"

namespace aiacc::cuda {

template <class T>  // float or BFloat16
void launch_relu_forward(const T* x, T* y, std::int64_t count, cudaStream_t stream);

template <class T>
void launch_relu_backward(const T* y, const T* dy, T* dx, std::int64_t count, cudaStream_t stream);

}  // namespace aiacc::cuda
