// CUDA memory sources for the caching allocator, and the per-device allocators.
#include "core/cuda/device_memory.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/log.h"

namespace aiacc::cuda {
namespace {

void warn_quietly(const std::string& what, cudaError_t status) noexcept {
  try {
    log::get("cuda")->warn("{} failed: {}", what, cudaGetErrorString(status));
  } catch (...) {
    // Nothing more to do in a noexcept path.
  }
}

// Events and the calls both sources share; `allocate` and `release` differ.
class CudaSourceBase : public memory::MemorySource {
 public:
  explicit CudaSourceBase(int device) : device_(device) {
    int count = 0;
    AIACC_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count) {
      throw CudaError(fmt::format("CUDA device {} does not exist ({} visible)", device, count));
    }
  }
  ~CudaSourceBase() override {
    for (cudaEvent_t e : spare_events_) {
      const cudaError_t status = cudaEventDestroy(e);
      if (status != cudaSuccess) warn_quietly("cudaEventDestroy", status);
    }
  }

  memory::EventId record_event(memory::StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t event = nullptr;
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    } else {
      AIACC_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    const cudaError_t status = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) {
      spare_events_.push_back(event);
      AIACC_CUDA_CHECK(status);
    }
    return reinterpret_cast<memory::EventId>(event);
  }

  bool event_done(memory::EventId event) override {
    const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error: clear it
      return false;
    }
    AIACC_CUDA_CHECK(status);
    return true;
  }

  void wait_event(memory::EventId event) override {
    AIACC_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }

  void release_event(memory::EventId event) noexcept override {
    // Kept for the next record: creating an event costs a driver call.
    try {
      spare_events_.push_back(reinterpret_cast<cudaEvent_t>(event));
    } catch (...) {
      const cudaError_t status = cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
      if (status != cudaSuccess) warn_quietly("cudaEventDestroy", status);
    }
  }

 protected:
  int device_;

 private:
  // Only touched under the allocator's mutex (it calls the source with it held).
  std::vector<cudaEvent_t> spare_events_;
};

// Out of memory is an answer (null), any other failure an error. The caller makes the call
// first and passes its result: in one expression `f(cudaMalloc(&ptr, n), ptr)` the compiler may
// copy `ptr` before cudaMalloc writes it (GCC does), which turned every allocation into "out of
// memory" on the first GPU run.
void* null_when_out_of_memory(cudaError_t status, void* ptr, const char* call) {
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (status != cudaSuccess) detail::throw_cuda_failure(__FILE__, __LINE__, call, status);
  return ptr;
}

class DeviceMemorySource final : public CudaSourceBase {
 public:
  using CudaSourceBase::CudaSourceBase;
  void* allocate(std::size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    return null_when_out_of_memory(status, ptr, "cudaMalloc");
  }
  void release(void* ptr, std::size_t bytes) noexcept override {
    const cudaError_t status = cudaFree(ptr);
    if (status != cudaSuccess) warn_quietly(fmt::format("cudaFree of {} bytes", bytes), status);
  }
  std::string describe() const override { return fmt::format("cuda device {}", device_); }
};

class PinnedMemorySource final : public CudaSourceBase {
 public:
  using CudaSourceBase::CudaSourceBase;
  void* allocate(std::size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    return null_when_out_of_memory(status, ptr, "cudaHostAlloc");
  }
  void release(void* ptr, std::size_t bytes) noexcept override {
    const cudaError_t status = cudaFreeHost(ptr);
    if (status != cudaSuccess) warn_quietly(fmt::format("cudaFreeHost of {} bytes", bytes), status);
  }
  std::string describe() const override {
    return fmt::format("pinned host memory (device {} streams)", device_);
  }
};

template <class Make>
memory::CachingAllocator& per_device(std::map<int, memory::CachingAllocator*>& table, int device,
                                     Make make) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  auto it = table.find(device);
  if (it != table.end()) return *it->second;
  // Never deleted: see the header.
  auto [source, options] = make(device);
  auto* allocator = new memory::CachingAllocator(std::move(source), options);
  table.emplace(device, allocator);
  return *allocator;
}

}  // namespace

std::unique_ptr<memory::MemorySource> make_device_memory_source(int device) {
  return std::make_unique<DeviceMemorySource>(device);
}

std::unique_ptr<memory::MemorySource> make_pinned_memory_source(int device) {
  return std::make_unique<PinnedMemorySource>(device);
}

memory::CachingAllocator& device_allocator(int device) {
  static std::map<int, memory::CachingAllocator*> allocators;
  return per_device(allocators, device, [](int d) {
    return std::make_pair(make_device_memory_source(d), memory::CachingAllocatorOptions{});
  });
}

memory::CachingAllocator& pinned_allocator(int device) {
  static std::map<int, memory::CachingAllocator*> allocators;
  return per_device(allocators, device, [](int d) {
    memory::CachingAllocatorOptions options;
    options.free_waits_for_own_stream = true;  // the CPU fills staging blocks without waiting
    return std::make_pair(make_pinned_memory_source(d), options);
  });
}

}  // namespace aiacc::cuda
