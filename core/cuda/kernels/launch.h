// Internal to core/cuda/kernels: grid sizing for element-wise kernels and the launch check.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace aiacc::cuda::detail {

constexpr int kThreads = 256;
// Grid-stride loops cover any n; 65535 blocks of 256 keep every SM busy on current GPUs.
inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

}  // namespace aiacc::cuda::detail

// A launch error (bad configuration, no device) surfaces at once, not at the next sync.
#define AIACC_CHECK_LAUNCH() AIACC_CUDA_CHECK(cudaGetLastError())
