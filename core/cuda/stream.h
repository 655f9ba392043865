// Move-only RAII owners of CUDA streams and events, and a guard that makes a device current
// for a scope. Destructors never throw; they log failures. Built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

namespace aiacc::cuda {

// A stream created with cudaStreamNonBlocking (no implicit sync with the legacy default stream).
// Destroying it waits for its queued work (see stream.cc: the allocator's pools are keyed by
// the handle, which the driver reuses).
class CudaStream {
 public:
  // Creates the stream on the current device; throws CudaError.
  static CudaStream create_non_blocking();
  CudaStream() = default;
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}
  void reset() noexcept;
  cudaStream_t stream_ = nullptr;
};

// An event for ordering between streams (cudaEventDisableTiming, the cheap kind), or one that
// also records a time (for cudaEventElapsedTime).
class CudaEvent {
 public:
  // Create the event on the current device; throw CudaError.
  static CudaEvent create_for_ordering();
  static CudaEvent create_for_timing();
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  void reset() noexcept;
  cudaEvent_t event_ = nullptr;
};

// The stream this thread's tensor work goes to (allocations, copies, zeroing): the legacy
// default stream (null) unless a StreamScope says otherwise.
cudaStream_t current_stream();

// Makes `stream` this thread's current stream until the scope dies (scopes nest).
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

// Makes `device` current for this thread until the guard dies, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);  // throws CudaError
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace aiacc::cuda
