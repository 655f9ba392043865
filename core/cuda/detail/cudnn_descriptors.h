// Internal to core/cuda: RAII cuDNN descriptors and the mappings every cuDNN layer shares.
// Built only with cuDNN.
#pragma once

#include <cudnn.h>
#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/tensor_layout.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor.h"

namespace aiacc::cuda::detail {

// A cuDNN descriptor, destroyed with it (the destructor logs failures). Neither copied nor moved:
// layers hold them by value inside a heap-allocated block.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { AIACC_CUDNN_CHECK(Create(&handle_)); }
  ~CudnnDescriptor() {
    const cudnnStatus_t status = Destroy(handle_);
    if (status != CUDNN_STATUS_SUCCESS) {
      try {
        log::get("cuda")->warn("destroying a cuDNN descriptor failed: {}", cudnnGetErrorString(status));
      } catch (...) {
        // Nothing more to do in a destructor.
      }
    }
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                         cudnnDestroyTensorDescriptor>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                         cudnnDestroyFilterDescriptor>;
using ConvDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                       cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                          cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor = CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                             cudnnDestroyActivationDescriptor>;

// `layer` names the caller in the ConfigError for an unsupported dtype.
inline cudnnDataType_t cudnn_type(DType dtype, const char* layer) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default:
      throw ConfigError(fmt::format("{}: dtype {} (expected f32, bf16 or f16)", layer, dtype_name(dtype)));
  }
}

inline cudnnTensorFormat_t cudnn_format(TensorLayout layout) {
  return layout == TensorLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// cuDNN takes int dimensions.
inline int cudnn_dim(std::int64_t v, const char* layer, const char* what) {
  if (v > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("{}: {} = {} does not fit cuDNN's int", layer, what, v));
  }
  return static_cast<int>(v);
}

// A 4-D tensor descriptor [n, c, h, w] in `layout`.
inline void set_4d(const TensorDescriptor& d, TensorLayout layout, cudnnDataType_t type, std::int64_t n,
                   std::int64_t c, std::int64_t h, std::int64_t w, const char* layer) {
  AIACC_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), cudnn_format(layout), type, cudnn_dim(n, layer, "N"),
                                               cudnn_dim(c, layer, "C"), cudnn_dim(h, layer, "H"),
                                               cudnn_dim(w, layer, "W")));
}

}  // namespace aiacc::cuda::detail
