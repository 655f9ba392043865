// fp16/bf16 <-> fp32 conversion on the GPU, and the unscale-and-check step of mixed-precision
// training. Each launcher queues one kernel on `stream` and checks the launch (CudaError);
// results are ready when the stream reaches that point. The CPU references are
// core/util/half.h's to_half / to_bf16 / to_float (round to nearest even, NaN stays NaN).
// Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/half.h"

namespace aiacc::cuda {

// out[n] = in[n] rounded to bf16 / fp16.
void launch_float_to_bf16(const float* in, BFloat16* out, std::int64_t n, cudaStream_t stream);
void launch_float_to_half(const float* in, Half* out, std::int64_t n, cudaStream_t stream);
// out[n] = in[n] widened to float (exact).
void launch_bf16_to_float(const BFloat16* in, float* out, std::int64_t n, cudaStream_t stream);
void launch_half_to_float(const Half* in, float* out, std::int64_t n, cudaStream_t stream);

// grads[n] *= inv_scale, and *found_nonfinite = 1 when any element is an infinity or a NaN
// (fp16 loss scaling: such a step is skipped and the scale lowered; optim::DynamicLossScaler).
// The CPU reference is optim::unscale_gradients. *found_nonfinite is a
// device int the caller zeroes; it is only ever set, so one flag can cover many tensors.
void launch_unscale_and_check(float* grads, std::int64_t n, float inv_scale, int* found_nonfinite,
                              cudaStream_t stream);
// The check alone: sets *found_nonfinite when a value is NaN or infinite (values unchanged).
void launch_check_finite(const float* values, std::int64_t n, int* found_nonfinite, cudaStream_t stream);

// Gradient clipping's sum of squares, in double: partial[b] for b < sum_squares_blocks(n) gets
// block b's share (a grid-stride loop, then a tree in shared memory), without atomics, so the
// bits depend on n alone; the caller sums the partials in order (optim::sum_of_squares is the
// CPU reference, equal up to rounding).
unsigned sum_squares_blocks(std::int64_t n);
void launch_sum_squares(const float* values, std::int64_t n, double* partial, cudaStream_t stream);

}  // namespace aiacc::cuda
