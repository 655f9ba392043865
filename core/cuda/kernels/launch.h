// Internal to core/cuda/kernels (.cu files): grid sizing for element-wise kernels, the launch
// check, and our storage types' device counterparts.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/util/half.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace aiacc::cuda::detail {

constexpr int kThreads = 256;
// Grid-stride loops cover any n; 65535 blocks of 256 keep every SM busy on current GPUs.
inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

#if defined(__CUDACC__)
// Our storage types as CUDA's: BFloat16 is __nv_bfloat16 (same bits), float is float.
template <class T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<BFloat16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceType<Half> {
  using type = __half;
};

__device__ inline float widen(float v) { return v; }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widen(__half v) { return __half2float(v); }
#endif

}  // namespace aiacc::cuda::detail

// A launch error (bad configuration, no device) surfaces at once, not at the next sync.
#define AIACC_CHECK_LAUNCH() AIACC_CUDA_CHECK(cudaGetLastError())
