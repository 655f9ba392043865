// A cuDNN handle on the current device (LibraryHandle). Built only with cuDNN.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/cuda/library_handle.h"

namespace aiacc::cuda {

struct CudnnTraits {
  using handle = cudnnHandle_t;
  static handle create();                                 // throws CudaError
  static void destroy(handle h) noexcept;                 // logs failures
  static void set_stream(handle h, cudaStream_t stream);  // throws CudaError
};
using CudnnHandle = LibraryHandle<CudnnTraits>;

}  // namespace aiacc::cuda
