// CUDA memory through core/memory's CachingAllocator: device memory (cudaMalloc) and pinned
// host memory (cudaHostAlloc), each cached per stream so a training step after the first one
// calls neither. Built only with CUDA.
//
//   auto& gpu = cuda::device_allocator(0);
//   memory::PooledBuffer activations(gpu, bytes, cuda::stream_id(stream));
//   memory::PooledBuffer staging(cuda::pinned_allocator(0), bytes, cuda::stream_id(copy_stream));
//   cudaMemcpyAsync(activations.get(), staging.get(), bytes, cudaMemcpyHostToDevice, copy_stream);
//   activations.record_stream(cuda::stream_id(copy_stream));  // used on a second stream
//
// Pinned host blocks follow the same stream rules: a staging buffer freed after an
// asynchronous copy goes back to the cache only once that copy has finished.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "core/memory/caching_allocator.h"

namespace aiacc::cuda {

inline memory::StreamId stream_id(cudaStream_t stream) {
  return reinterpret_cast<memory::StreamId>(stream);
}

// cudaMalloc / cudaFree on `device`; events are cudaEvents without timing, reused.
std::unique_ptr<memory::MemorySource> make_device_memory_source(int device);
// Page-locked host memory (cudaHostAllocPortable), with events recorded on `device`'s streams.
std::unique_ptr<memory::MemorySource> make_pinned_memory_source(int device);

// The process's caching allocators, created on first use (thread-safe) and kept until the
// process exits: destroying them at exit would call into an already unloaded CUDA runtime.
// Throws CudaError for a device that does not exist.
memory::CachingAllocator& device_allocator(int device);
memory::CachingAllocator& pinned_allocator(int device);

}  // namespace aiacc::cuda
