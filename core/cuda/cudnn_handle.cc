#include "core/cuda/cudnn_handle.h"

#include "core/cuda/cuda_check.h"
#include "core/log.h"

namespace aiacc::cuda {

CudnnHandle CudnnHandle::create() {
  cudnnHandle_t handle = nullptr;
  AIACC_CUDNN_CHECK(cudnnCreate(&handle));
  return CudnnHandle(handle);
}

CudnnHandle::~CudnnHandle() {
  if (handle_ == nullptr) return;
  const cudnnStatus_t status = cudnnDestroy(handle_);
  if (status != CUDNN_STATUS_SUCCESS) {
    try {
      log::get("cuda")->warn("cudnnDestroy failed: {}", cudnnGetErrorString(status));
    } catch (...) {
      // Nothing more to do in a destructor.
    }
  }
}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& other) noexcept {
  if (this != &other) {
    CudnnHandle old(handle_);  // destroyed at the end of this scope
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

cudnnHandle_t CudnnHandle::on(cudaStream_t stream) const {
  AIACC_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  return handle_;
}

}  // namespace aiacc::cuda
