// The caching allocator on a real GPU: data survives device <-> pinned round trips on two
// streams, repeated steps never reach cudaMalloc again, a block used on a second stream is not
// reused before that stream's work is done, and an impossible request is an OutOfMemoryError
// that leaves the allocator usable. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace aiacc::cuda {
namespace {

TEST(GpuDeviceMemory, PinnedRoundTripOnTwoStreams) {
  const CudaStream copy = CudaStream::create_non_blocking();
  const CudaStream compute = CudaStream::create_non_blocking();
  const CudaEvent copied = CudaEvent::create_for_ordering();
  const std::size_t n = 3'000'001;  // odd, and more than one small segment
  memory::PooledBuffer host_in(pinned_allocator(0), n * 4, stream_id(copy.get()));
  memory::PooledBuffer host_out(pinned_allocator(0), n * 4, stream_id(compute.get()));
  memory::PooledBuffer device(device_allocator(0), n * 4, stream_id(copy.get()));
  for (std::size_t i = 0; i < n; ++i) host_in.data<float>()[i] = static_cast<float>(i % 1000) - 0.5f;
  AIACC_CUDA_CHECK(cudaMemcpyAsync(device.get(), host_in.get(), n * 4, cudaMemcpyHostToDevice, copy.get()));
  AIACC_CUDA_CHECK(cudaEventRecord(copied.get(), copy.get()));
  AIACC_CUDA_CHECK(cudaStreamWaitEvent(compute.get(), copied.get(), 0));
  device.record_stream(stream_id(compute.get()));
  AIACC_CUDA_CHECK(cudaMemcpyAsync(host_out.get(), device.get(), n * 4, cudaMemcpyDeviceToHost, compute.get()));
  AIACC_CUDA_CHECK(cudaStreamSynchronize(compute.get()));
  EXPECT_EQ(std::memcmp(host_in.get(), host_out.get(), n * 4), 0);
}

TEST(GpuDeviceMemory, StepsAfterTheFirstNeverCallCudaMalloc) {
  const CudaStream compute = CudaStream::create_non_blocking();
  const CudaStream comm = CudaStream::create_non_blocking();
  auto& gpu = device_allocator(0);
  const std::vector<std::size_t> sizes = {64u << 20, 3u << 20, 3u << 20, 700u << 10, 4096, 1000, 9u << 20};
  std::int64_t after_first = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<memory::PooledBuffer> live;
    for (std::size_t bytes : sizes) {
      live.emplace_back(gpu, bytes, stream_id(compute.get()));
      AIACC_CUDA_CHECK(cudaMemsetAsync(live.back().get(), step, bytes, compute.get()));
    }
    // A bucket read on the communication stream after compute wrote it.
    memory::PooledBuffer bucket(gpu, 8u << 20, stream_id(compute.get()));
    AIACC_CUDA_CHECK(cudaMemsetAsync(bucket.get(), 1, 8u << 20, compute.get()));
    AIACC_CUDA_CHECK(cudaStreamSynchronize(compute.get()));
    bucket.record_stream(stream_id(comm.get()));
    AIACC_CUDA_CHECK(cudaMemsetAsync(bucket.get(), 2, 8u << 20, comm.get()));
    bucket.reset();
    live.clear();
    AIACC_CUDA_CHECK(cudaStreamSynchronize(comm.get()));
    if (step == 0) after_first = gpu.stats().source_allocations;
  }
  EXPECT_EQ(gpu.stats().source_allocations, after_first);
}

TEST(GpuDeviceMemory, ABlockUsedOnAnotherStreamWaitsForIt) {
  const CudaStream a = CudaStream::create_non_blocking();
  const CudaStream b = CudaStream::create_non_blocking();
  auto& gpu = device_allocator(0);
  void* first = gpu.allocate(1 << 20, stream_id(a.get()));
  // Keep stream b busy long enough that its use cannot have finished at the next allocate.
  memory::PooledBuffer big(gpu, 256u << 20, stream_id(b.get()));
  for (int i = 0; i < 20; ++i) AIACC_CUDA_CHECK(cudaMemsetAsync(big.get(), i, 256u << 20, b.get()));
  gpu.record_stream(first, stream_id(b.get()));
  gpu.free(first);
  void* second = gpu.allocate(1 << 20, stream_id(a.get()));
  EXPECT_NE(second, first);
  AIACC_CUDA_CHECK(cudaStreamSynchronize(b.get()));
  gpu.free(second);
  void* third = gpu.allocate(1 << 20, stream_id(a.get()));
  EXPECT_EQ(third, first);  // b's work is done: the block is back
  gpu.free(third);
}

TEST(GpuDeviceMemory, AnImpossibleRequestIsOutOfMemoryAndNothingIsLost) {
  auto& gpu = device_allocator(0);
  const auto before = gpu.stats();
  EXPECT_THROW(gpu.allocate(std::size_t{1} << 50, 0), OutOfMemoryError);  // a petabyte
  EXPECT_EQ(gpu.stats().bytes_in_use, before.bytes_in_use);
  memory::PooledBuffer still_works(gpu, 1 << 20, 0);
  EXPECT_TRUE(still_works);
}

TEST(GpuDeviceMemory, AMissingDeviceIsACudaError) {
  EXPECT_THROW(device_allocator(1 << 20), CudaError);
}

}  // namespace
}  // namespace aiacc::cuda
