// Conversion kernels: CUDA's own round-to-nearest-even intrinsics, which agree bit for bit with
// core/util/half.h on every finite input, infinities and NaN (as NaN).
#include "core/cuda/kernels/precision.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

// out[i] = convert(in[i]), one CUDA intrinsic per element (the Convert functors below).
template <class In, class Out, class Convert>
__global__ void convert_kernel(const In* in, Out* out, std::int64_t n, Convert convert) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    out[i] = convert(in[i]);
  }
}

struct ToBf16 {
  __device__ __nv_bfloat16 operator()(float v) const { return __float2bfloat16_rn(v); }
};
struct ToHalf {
  __device__ __half operator()(float v) const { return __float2half_rn(v); }
};
struct FromBf16 {
  __device__ float operator()(__nv_bfloat16 v) const { return __bfloat162float(v); }
};
struct FromHalf {
  __device__ float operator()(__half v) const { return __half2float(v); }
};

template <class In, class Out, class Convert>
void launch_convert(const In* in, Out* out, std::int64_t n, Convert convert, cudaStream_t stream) {
  if (n <= 0) return;
  convert_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(in, out, n, convert);
  AIACC_CHECK_LAUNCH();
}

// kUnscale false: only the check (grads is then never written).
template <bool kUnscale>
__global__ void unscale_and_check_kernel(float* grads, std::int64_t n, float inv_scale,
                                         int* found_nonfinite) {
  bool bad = false;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const float g = grads[i];
    bad |= !isfinite(g);
    if (kUnscale) grads[i] = g * inv_scale;
  }
  // One write per warp that saw a bad value, not one per element.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x % 32) == 0) *found_nonfinite = 1;
}

// partial[blockIdx.x] = the sum of squares of this block's grid-stride share of values.
__global__ void sum_squares_kernel(const float* values, std::int64_t n, double* partial) {
  __shared__ double lanes[detail::kThreads];
  double sum = 0.0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const double v = values[i];
    sum += v * v;
  }
  lanes[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) lanes[threadIdx.x] += lanes[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = lanes[0];
}

// Partials per tensor: enough blocks to fill a GPU for a big tensor, few to copy back.
constexpr unsigned kMaxSumSquaresBlocks = 128;

}  // namespace

unsigned sum_squares_blocks(std::int64_t n) { return std::min(detail::blocks_for(n), kMaxSumSquaresBlocks); }

void launch_sum_squares(const float* values, std::int64_t n, double* partial, cudaStream_t stream) {
  const unsigned blocks = sum_squares_blocks(n);
  sum_squares_kernel<<<blocks, detail::kThreads, 0, stream>>>(values, n, partial);
  AIACC_CHECK_LAUNCH();
}

void launch_float_to_bf16(const float* in, BFloat16* out, std::int64_t n, cudaStream_t stream) {
  launch_convert(in, reinterpret_cast<__nv_bfloat16*>(out), n, ToBf16{}, stream);
}

void launch_float_to_half(const float* in, Half* out, std::int64_t n, cudaStream_t stream) {
  launch_convert(in, reinterpret_cast<__half*>(out), n, ToHalf{}, stream);
}

void launch_bf16_to_float(const BFloat16* in, float* out, std::int64_t n, cudaStream_t stream) {
  launch_convert(reinterpret_cast<const __nv_bfloat16*>(in), out, n, FromBf16{}, stream);
}

void launch_half_to_float(const Half* in, float* out, std::int64_t n, cudaStream_t stream) {
  launch_convert(reinterpret_cast<const __half*>(in), out, n, FromHalf{}, stream);
}

void launch_unscale_and_check(float* grads, std::int64_t n, float inv_scale, int* found_nonfinite,
                              cudaStream_t stream) {
  if (n <= 0) return;
  unscale_and_check_kernel<true><<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      grads, n, inv_scale, found_nonfinite);
  AIACC_CHECK_LAUNCH();
}

void launch_check_finite(const float* values, std::int64_t n, int* found_nonfinite, cudaStream_t stream) {
  if (n <= 0) return;
  unscale_and_check_kernel<false><<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      const_cast<float*>(values), n, 1.0f, found_nonfinite);  // never written when not unscaling
  AIACC_CHECK_LAUNCH();
}

}  // namespace aiacc::cuda
