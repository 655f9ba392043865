// Staged host <-> device copies: two pinned chunks alternate, so the host copies chunk k + 1
// while chunk k is on its way.
#include "core/cuda/copy.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"

namespace aiacc::cuda {
namespace {

// Two pinned chunks and their events; a copy that fits one chunk gets only the first.
struct StagingPair {
  StagingPair(std::size_t bytes, int device, cudaStream_t stream) : chunk(std::min(bytes, kStagingChunkBytes)) {
    const int count = bytes > chunk ? 2 : 1;
    for (int k = 0; k < count; ++k) {
      buffers[k] = memory::PooledBuffer(pinned_allocator(device), chunk, stream_id(stream));
      sent[k] = CudaEvent::create_for_ordering();
    }
  }
  std::size_t chunk;
  std::array<memory::PooledBuffer, 2> buffers;
  std::array<CudaEvent, 2> sent;  // the last copy out of (or into) each buffer
  std::array<bool, 2> in_flight{false, false};
};

}  // namespace

void copy_host_to_device(void* dst, const void* src, std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  StagingPair staging(bytes, device, stream);
  for (std::size_t offset = 0, k = 0; offset < bytes; offset += staging.chunk, k ^= 1) {
    const std::size_t n = std::min(staging.chunk, bytes - offset);
    if (staging.in_flight[k]) AIACC_CUDA_CHECK(cudaEventSynchronize(staging.sent[k].get()));
    std::memcpy(staging.buffers[k].get(), static_cast<const char*>(src) + offset, n);
    AIACC_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, staging.buffers[k].get(), n,
                                     cudaMemcpyHostToDevice, stream));
    AIACC_CUDA_CHECK(cudaEventRecord(staging.sent[k].get(), stream));
    staging.in_flight[k] = true;
  }
  // The staging blocks go back to the pinned cache now; it reuses them only after the copies
  // queued on `stream` have finished (pinned blocks wait for their own stream).
}

void copy_device_to_host(void* dst, const void* src, std::size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  StagingPair staging(bytes, device, stream);
  // Chunk k + 1 is queued before chunk k is unpacked, so the transfer and the host copy overlap.
  std::size_t pending_offset = 0, pending_bytes = 0;
  std::size_t pending_k = 0;
  for (std::size_t offset = 0, k = 0; offset < bytes; offset += staging.chunk, k ^= 1) {
    const std::size_t n = std::min(staging.chunk, bytes - offset);
    AIACC_CUDA_CHECK(cudaMemcpyAsync(staging.buffers[k].get(), static_cast<const char*>(src) + offset,
                                     n, cudaMemcpyDeviceToHost, stream));
    AIACC_CUDA_CHECK(cudaEventRecord(staging.sent[k].get(), stream));
    if (pending_bytes > 0) {
      AIACC_CUDA_CHECK(cudaEventSynchronize(staging.sent[pending_k].get()));
      std::memcpy(static_cast<char*>(dst) + pending_offset, staging.buffers[pending_k].get(), pending_bytes);
    }
    pending_offset = offset;
    pending_bytes = n;
    pending_k = k;
  }
  AIACC_CUDA_CHECK(cudaEventSynchronize(staging.sent[pending_k].get()));
  std::memcpy(static_cast<char*>(dst) + pending_offset, staging.buffers[pending_k].get(), pending_bytes);
}

}  // namespace aiacc::cuda
