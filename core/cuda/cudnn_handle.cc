#include "core/cuda/cudnn_handle.h"

#include "core/cuda/cuda_check.h"
#include "core/log.h"

namespace aiacc::cuda {

cudnnHandle_t CudnnTraits::create() {
  cudnnHandle_t h = nullptr;
  AIACC_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

void CudnnTraits::destroy(cudnnHandle_t h) noexcept {
  const cudnnStatus_t status = cudnnDestroy(h);
  if (status == CUDNN_STATUS_SUCCESS) return;
  try {
    log::get("cuda")->warn("cudnnDestroy failed: {}", cudnnGetErrorString(status));
  } catch (...) {
    // Nothing more to do in a noexcept path.
  }
}

void CudnnTraits::set_stream(cudnnHandle_t h, cudaStream_t stream) {
  AIACC_CUDNN_CHECK(cudnnSetStream(h, stream));
}

}  // namespace aiacc::cuda
