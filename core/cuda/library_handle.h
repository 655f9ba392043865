// LibraryHandle: the RAII owner of a CUDA library's context handle (cuBLAS, cuDNN), created on
// the current device, bound to a stream per call. Move-only; the destructor logs failures.
// Traits supply the library: `handle` (the type), and create / destroy / set_stream, where
// create and set_stream throw CudaError and destroy never throws. Built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

namespace aiacc::cuda {

template <class Traits>
class LibraryHandle {
 public:
  using Handle = typename Traits::handle;

  static LibraryHandle create() { return LibraryHandle(Traits::create()); }
  LibraryHandle() = default;
  ~LibraryHandle() {
    if (handle_ != nullptr) Traits::destroy(handle_);
  }
  LibraryHandle(LibraryHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  LibraryHandle& operator=(LibraryHandle&& other) noexcept {
    if (this != &other) {
      if (handle_ != nullptr) Traits::destroy(handle_);
      handle_ = other.handle_;
      other.handle_ = nullptr;
    }
    return *this;
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;

  // The handle with its work queued on `stream` from now on.
  Handle on(cudaStream_t stream) const {
    Traits::set_stream(handle_, stream);
    return handle_;
  }

 private:
  explicit LibraryHandle(Handle handle) : handle_(handle) {}
  Handle handle_ = nullptr;
};

}  // namespace aiacc::cuda
