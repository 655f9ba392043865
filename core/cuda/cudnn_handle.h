// A cuDNN handle on the current device. Move-only; the destructor logs failures. Built only
// with cuDNN.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace aiacc::cuda {

class CudnnHandle {
 public:
  static CudnnHandle create();  // throws CudaError
  CudnnHandle() = default;
  ~CudnnHandle();
  CudnnHandle(CudnnHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CudnnHandle& operator=(CudnnHandle&& other) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  // The handle with its work queued on `stream` from now on.
  cudnnHandle_t on(cudaStream_t stream) const;

 private:
  explicit CudnnHandle(cudnnHandle_t handle) : handle_(handle) {}
  cudnnHandle_t handle_ = nullptr;
};

}  // namespace aiacc::cuda
