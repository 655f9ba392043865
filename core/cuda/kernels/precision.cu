// Conversion kernels: CUDA's own round-to-nearest-even intrinsics, which agree bit for bit with
// core/util/half.h on every finite input, infinities and NaN (as NaN).
#include "core/cuda/kernels/precision.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

__global__ void float_to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void float_to_half_kernel(const float* in, __half* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    out[i] = __float2half_rn(in[i]);
  }
}

__global__ void bf16_to_float_kernel(const __nv_bfloat16* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

__global__ void half_to_float_kernel(const __half* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    out[i] = __half2float(in[i]);
  }
}

__global__ void unscale_and_check_kernel(float* grads, std::int64_t n, float inv_scale,
                                         int* found_nonfinite) {
  bool bad = false;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const float g = grads[i];
    bad |= !isfinite(g);
    grads[i] = g * inv_scale;
  }
  // One write per warp that saw a bad value, not one per element.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x % 32) == 0) *found_nonfinite = 1;
}

}  // namespace

void launch_float_to_bf16(const float* in, BFloat16* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  float_to_bf16_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      in, reinterpret_cast<__nv_bfloat16*>(out), n);
  AIACC_CHECK_LAUNCH();
}

void launch_float_to_half(const float* in, Half* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  float_to_half_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      in, reinterpret_cast<__half*>(out), n);
  AIACC_CHECK_LAUNCH();
}

void launch_bf16_to_float(const BFloat16* in, float* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  bf16_to_float_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(in), out, n);
  AIACC_CHECK_LAUNCH();
}

void launch_half_to_float(const Half* in, float* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  half_to_float_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const __half*>(in), out, n);
  AIACC_CHECK_LAUNCH();
}

void launch_unscale_and_check(float* grads, std::int64_t n, float inv_scale, int* found_nonfinite,
                              cudaStream_t stream) {
  if (n <= 0) return;
  unscale_and_check_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      grads, n, inv_scale, found_nonfinite);
  AIACC_CHECK_LAUNCH();
}

}  // namespace aiacc::cuda
