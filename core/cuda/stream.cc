#include "core/cuda/stream.h"

#include "core/cuda/cuda_check.h"
#include "core/log.h"

namespace aiacc::cuda {

namespace {
// Destructors must not throw, not even when logging fails.
void warn_quietly(const char* what, cudaError_t status) noexcept {
  try {
    log::get("cuda")->warn("{} failed: {}", what, cudaGetErrorString(status));
  } catch (...) {
    // Nothing more to do in a noexcept path.
  }
}
}  // namespace

CudaStream CudaStream::create_non_blocking() {
  cudaStream_t stream = nullptr;
  AIACC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(stream);
}

CudaStream::~CudaStream() { reset(); }

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

void CudaStream::reset() noexcept {
  if (stream_ == nullptr) return;
  // Waits for the stream's work first: the caching allocator keys its pools by the stream
  // handle, and the driver may hand the same handle to the next stream created, which must not
  // get blocks this stream's queued kernels still use. (Streams are created and destroyed
  // rarely; the wait costs nothing in a step.)
  const cudaError_t synced = cudaStreamSynchronize(stream_);
  if (synced != cudaSuccess) warn_quietly("cudaStreamSynchronize (before destroying the stream)", synced);
  const cudaError_t status = cudaStreamDestroy(stream_);
  if (status != cudaSuccess) warn_quietly("cudaStreamDestroy", status);
  stream_ = nullptr;
}

CudaEvent CudaEvent::create_for_ordering() {
  cudaEvent_t event = nullptr;
  AIACC_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return CudaEvent(event);
}

CudaEvent CudaEvent::create_for_timing() {
  cudaEvent_t event = nullptr;
  AIACC_CUDA_CHECK(cudaEventCreate(&event));
  return CudaEvent(event);
}

CudaEvent::~CudaEvent() { reset(); }

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::reset() noexcept {
  if (event_ == nullptr) return;
  const cudaError_t status = cudaEventDestroy(event_);
  if (status != cudaSuccess) warn_quietly("cudaEventDestroy", status);
  event_ = nullptr;
}

namespace {
thread_local cudaStream_t current = nullptr;
}  // namespace

cudaStream_t current_stream() { return current; }

StreamScope::StreamScope(cudaStream_t stream) : previous_(current) { current = stream; }

StreamScope::~StreamScope() { current = previous_; }

DeviceGuard::DeviceGuard(int device) {
  AIACC_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    AIACC_CUDA_CHECK(cudaSetDevice(device));
    restore_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (!restore_) return;
  const cudaError_t status = cudaSetDevice(previous_);
  if (status != cudaSuccess) warn_quietly("cudaSetDevice (restoring the previous device)", status);
}

}  // namespace aiacc::cuda
