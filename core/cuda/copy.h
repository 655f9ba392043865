// Copies between host memory and a GPU that go through pinned staging blocks (from
// cuda::pinned_allocator), so the DMA engine reads page-locked memory and a host-to-device copy
// does not keep the caller waiting for the transfer. Built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace aiacc::cuda {

// Queues `bytes` from host `src` to device `dst` (on `device`) on `stream` and returns once
// `src` may be changed; the data is ready for later work on `stream`. Large copies go in
// staging chunks (kStagingChunkBytes), the host filling one while the previous one is sent.
void copy_host_to_device(void* dst, const void* src, std::size_t bytes, int device, cudaStream_t stream);

// Copies `bytes` from device `src` (on `device`) to host `dst` after the work queued on
// `stream`; returns when `dst` holds them.
void copy_device_to_host(void* dst, const void* src, std::size_t bytes, int device, cudaStream_t stream);

inline constexpr std::size_t kStagingChunkBytes = std::size_t{32} << 20;

}  // namespace aiacc::cuda
