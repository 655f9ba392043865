// Caching allocator benchmark: one training step's allocation pattern (activations from 512 B
// to 25 MiB, half freed during backward, gradient buckets handed to a second stream) served by
// memory::CachingAllocator over plain host memory, against the same pattern through malloc/free
// (glibc maps and unmaps blocks above its mmap threshold, as cudaMalloc/cudaFree go to the
// driver each time). items/s: allocate+free pairs per second.
//   aiacc-bench-kernels --benchmark_filter=Allocator
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/memory/caching_allocator.h"

namespace {

using aiacc::memory::CachingAllocator;
using aiacc::memory::EventId;
using aiacc::memory::StreamId;

// Host memory; streams run nothing, so every event has finished.
class HostSource : public aiacc::memory::MemorySource {
 public:
  void* allocate(std::size_t bytes) override { return std::malloc(bytes); }
  void release(void* ptr, std::size_t) noexcept override { std::free(ptr); }
  EventId record_event(StreamId) override { return 1; }
  bool event_done(EventId) override { return true; }
  void wait_event(EventId) override {}
  void release_event(EventId) noexcept override {}
  std::string describe() const override { return "host memory"; }
};

const std::vector<std::size_t>& step_sizes() {
  static const std::vector<std::size_t> sizes = {6u << 20, 3u << 20, 3u << 20, 768u << 10, 768u << 10,
                                                 200u << 10, 48u << 10, 12u << 20, (1u << 20) + 1, 4u << 10,
                                                 96, 100u << 10, 25u << 20, 512, (2u << 20) + 512};
  return sizes;
}

// Touches the first byte of a block, as a kernel writing it would make the memory real.
void touch(void* p) { static_cast<volatile char*>(p)[0] = 1; }

void BM_AllocatorStepCaching(benchmark::State& state) {
  CachingAllocator allocator(std::make_unique<HostSource>());
  constexpr StreamId compute = 1, comm = 2;
  std::vector<void*> live;
  for (auto _ : state) {
    for (std::size_t bytes : step_sizes()) {
      live.push_back(allocator.allocate(bytes, compute));
      touch(live.back());
    }
    for (std::size_t i = 0; i < live.size(); i += 2) {
      void* bucket = allocator.allocate(4u << 20, compute);
      touch(bucket);
      allocator.record_stream(bucket, comm);
      allocator.free(bucket);
      allocator.free(live[i]);
    }
    for (std::size_t i = 1; i < live.size(); i += 2) allocator.free(live[i]);
    live.clear();
  }
  const auto pairs = static_cast<std::int64_t>(step_sizes().size() + (step_sizes().size() + 1) / 2);
  state.SetItemsProcessed(state.iterations() * pairs);
  state.counters["source_allocations"] = static_cast<double>(allocator.stats().source_allocations);
}
BENCHMARK(BM_AllocatorStepCaching);

void BM_AllocatorStepMalloc(benchmark::State& state) {
  std::vector<void*> live;
  for (auto _ : state) {
    for (std::size_t bytes : step_sizes()) {
      live.push_back(std::malloc(bytes));
      touch(live.back());
    }
    for (std::size_t i = 0; i < live.size(); i += 2) {
      void* bucket = std::malloc(4u << 20);
      touch(bucket);
      std::free(bucket);
      std::free(live[i]);
    }
    for (std::size_t i = 1; i < live.size(); i += 2) std::free(live[i]);
    live.clear();
  }
  const auto pairs = static_cast<std::int64_t>(step_sizes().size() + (step_sizes().size() + 1) / 2);
  state.SetItemsProcessed(state.iterations() * pairs);
}
BENCHMARK(BM_AllocatorStepMalloc);

}  // namespace
