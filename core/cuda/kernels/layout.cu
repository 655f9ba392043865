// Layout conversions, global average pooling in either layout and the bf16 joins: one thread per
// output value in grid-stride loops; the joins move eight bf16 values per 16-byte access.
#include "core/cuda/kernels/layout.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(__half v) { return __half2float(v); }
template <class D>
__device__ inline D from_float(float v);
template <>
__device__ inline float from_float<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }

// Offset of value (n, c, s) of [N, C, S] in either layout.
__device__ inline std::int64_t offset(std::int64_t n, std::int64_t c, std::int64_t s, std::int64_t channels,
                                      std::int64_t spatial, bool channels_last) {
  return channels_last ? (n * spatial + s) * channels + c : (n * channels + c) * spatial + s;
}

template <class In, class Out>
__global__ void convert_layout_kernel(const In* in, bool in_last, Out* out, bool out_last, std::int64_t count,
                                      std::int64_t channels, std::int64_t spatial) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    // Walk the output in its own order (coalesced writes); reads follow.
    std::int64_t n, c, s;
    if (out_last) {
      c = i % channels;
      s = (i / channels) % spatial;
      n = i / (channels * spatial);
    } else {
      s = i % spatial;
      c = (i / spatial) % channels;
      n = i / (channels * spatial);
    }
    out[i] = from_float<Out>(to_float(in[offset(n, c, s, channels, spatial, in_last)]));
  }
}

template <class In>
__global__ void global_avg_pool_forward_kernel(const In* x, bool last, float* y, std::int64_t planes,
                                               std::int64_t channels, std::int64_t spatial, float inv_spatial) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < planes;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t n = i / channels, c = i % channels;
    float sum = 0.0f;
    for (std::int64_t s = 0; s < spatial; ++s) sum += to_float(x[offset(n, c, s, channels, spatial, last)]);
    y[i] = sum * inv_spatial;
  }
}

template <class Out>
__global__ void global_avg_pool_backward_kernel(const float* dy, Out* dx, bool last, std::int64_t count,
                                                std::int64_t channels, std::int64_t spatial, float inv_spatial) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t c = last ? i % channels : (i / spatial) % channels;
    const std::int64_t n = i / (channels * spatial);
    dx[i] = from_float<Out>(dy[n * channels + c] * inv_spatial);
  }
}

template <bool kRelu>
__device__ inline __nv_bfloat162 join(__nv_bfloat162 a, __nv_bfloat162 b) {
  const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
  float lo = fa.x + fb.x, hi = fa.y + fb.y;
  if (kRelu) {
    lo = lo < 0.0f ? 0.0f : lo;  // `<` keeps NaN
    hi = hi < 0.0f ? 0.0f : hi;
  }
  return __floats2bfloat162_rn(lo, hi);
}

// Eight values per iteration through 16-byte accesses (count a multiple of 8, 16-byte aligned).
template <bool kRelu>
__global__ void join_bf16_vector_kernel(const uint4* a, const uint4* b, uint4* y, std::int64_t vectors) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    uint4 va = a[i], vb = b[i], out;
    const auto* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
    const auto* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
    auto* po = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) po[k] = join<kRelu>(pa[k], pb[k]);
    y[i] = out;
  }
}

template <bool kRelu>
__global__ void join_bf16_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y,
                                 std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    float sum = __bfloat162float(a[i]) + __bfloat162float(b[i]);
    if (kRelu && sum < 0.0f) sum = 0.0f;
    y[i] = __float2bfloat16_rn(sum);
  }
}

template <bool kRelu>
void launch_join_bf16(const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (count % 8 == 0 && aligned(a) && aligned(b) && aligned(y)) {
    const std::int64_t vectors = count / 8;
    join_bf16_vector_kernel<kRelu><<<detail::blocks_for(vectors), detail::kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b), reinterpret_cast<uint4*>(y), vectors);
  } else {
    join_bf16_kernel<kRelu><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
        reinterpret_cast<const __nv_bfloat16*>(a), reinterpret_cast<const __nv_bfloat16*>(b),
        reinterpret_cast<__nv_bfloat16*>(y), count);
  }
  AIACC_CHECK_LAUNCH();
}

template <bool kRelu, class D>
__global__ void join_kernel(const D* a, const D* b, D* y, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    float sum = to_float(a[i]) + to_float(b[i]);
    if (kRelu && sum < 0.0f) sum = 0.0f;
    y[i] = from_float<D>(sum);
  }
}

template <bool kRelu>
void launch_join_f16(const Half* a, const Half* b, Half* y, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  join_kernel<kRelu, __half><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const __half*>(a), reinterpret_cast<const __half*>(b), reinterpret_cast<__half*>(y), count);
  AIACC_CHECK_LAUNCH();
}

}  // namespace

void launch_add_f16(const Half* a, const Half* b, Half* y, std::int64_t count, cudaStream_t stream) {
  launch_join_f16<false>(a, b, y, count, stream);
}

void launch_add_relu_f16(const Half* a, const Half* b, Half* y, std::int64_t count, cudaStream_t stream) {
  launch_join_f16<true>(a, b, y, count, stream);
}

template <class In, class Out>
void launch_convert_layout(const In* in, bool in_channels_last, Out* out, bool out_channels_last,
                           std::int64_t batch, std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  const std::int64_t count = batch * channels * spatial;
  if (count <= 0) return;
  using DIn = typename detail::DeviceType<In>::type;
  using DOut = typename detail::DeviceType<Out>::type;
  convert_layout_kernel<DIn, DOut><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const DIn*>(in), in_channels_last, reinterpret_cast<DOut*>(out), out_channels_last, count,
      channels, spatial);
  AIACC_CHECK_LAUNCH();
}

template <class In>
void launch_global_avg_pool_forward(const In* x, bool channels_last, float* y, std::int64_t batch,
                                    std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  const std::int64_t planes = batch * channels;
  if (planes <= 0) return;
  using D = typename detail::DeviceType<In>::type;
  global_avg_pool_forward_kernel<D><<<detail::blocks_for(planes), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const D*>(x), channels_last, y, planes, channels, spatial,
      1.0f / static_cast<float>(spatial));
  AIACC_CHECK_LAUNCH();
}

template <class Out>
void launch_global_avg_pool_backward_any(const float* dy, Out* dx, bool channels_last, std::int64_t batch,
                                         std::int64_t channels, std::int64_t spatial, cudaStream_t stream) {
  const std::int64_t count = batch * channels * spatial;
  if (count <= 0) return;
  using D = typename detail::DeviceType<Out>::type;
  global_avg_pool_backward_kernel<D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      dy, reinterpret_cast<D*>(dx), channels_last, count, channels, spatial, 1.0f / static_cast<float>(spatial));
  AIACC_CHECK_LAUNCH();
}

void launch_add_bf16(const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t count, cudaStream_t stream) {
  launch_join_bf16<false>(a, b, y, count, stream);
}

void launch_add_relu_bf16(const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t count,
                          cudaStream_t stream) {
  launch_join_bf16<true>(a, b, y, count, stream);
}

template void launch_convert_layout<float, BFloat16>(const float*, bool, BFloat16*, bool, std::int64_t, std::int64_t,
                                                     std::int64_t, cudaStream_t);
template void launch_convert_layout<BFloat16, float>(const BFloat16*, bool, float*, bool, std::int64_t, std::int64_t,
                                                     std::int64_t, cudaStream_t);
template void launch_convert_layout<float, float>(const float*, bool, float*, bool, std::int64_t, std::int64_t,
                                                  std::int64_t, cudaStream_t);
template void launch_convert_layout<float, Half>(const float*, bool, Half*, bool, std::int64_t, std::int64_t,
                                                 std::int64_t, cudaStream_t);
template void launch_convert_layout<Half, float>(const Half*, bool, float*, bool, std::int64_t, std::int64_t,
                                                 std::int64_t, cudaStream_t);
template void launch_global_avg_pool_forward<Half>(const Half*, bool, float*, std::int64_t, std::int64_t,
                                                   std::int64_t, cudaStream_t);
template void launch_global_avg_pool_backward_any<Half>(const float*, Half*, bool, std::int64_t, std::int64_t,
                                                        std::int64_t, cudaStream_t);
template void launch_global_avg_pool_forward<float>(const float*, bool, float*, std::int64_t, std::int64_t,
                                                    std::int64_t, cudaStream_t);
template void launch_global_avg_pool_forward<BFloat16>(const BFloat16*, bool, float*, std::int64_t, std::int64_t,
                                                       std::int64_t, cudaStream_t);
template void launch_global_avg_pool_backward_any<float>(const float*, float*, bool, std::int64_t, std::int64_t,
                                                         std::int64_t, cudaStream_t);
template void launch_global_avg_pool_backward_any<BFloat16>(const float*, BFloat16*, bool, std::int64_t,
                                                            std::int64_t, std::int64_t, cudaStream_t);

}  // namespace aiacc::cuda
