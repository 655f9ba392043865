// 2-D max and average pooling on the GPU through cuDNN: the math of core/kernels/pooling.h
// (floor mode; average counts padding, PyTorch's default; NaN propagates through max) for NCHW
// or NHWC activations of fp32, bf16 or fp16. cuDNN's max-pool backward finds each window's
// maximum again from x and y instead of keeping an argmax, so with tied maxima it may route a
// gradient to another of the tied inputs than the CPU's first-in-scan-order rule.
// Built only with cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "core/cuda/cudnn_handle.h"
#include "core/cuda/tensor_layout.h"
#include "core/kernels/pooling.h"
#include "core/tensor.h"

namespace aiacc::cuda {

enum class PoolMode { max, average };

class CudnnPool2d {
 public:
  // Validates the geometry (InternalError); ConfigError for a dtype cuDNN refuses.
  CudnnPool2d(const kernels::Pool2dGeometry& geometry, PoolMode mode, DType dtype, TensorLayout layout,
              int device);
  ~CudnnPool2d();
  CudnnPool2d(const CudnnPool2d&) = delete;
  CudnnPool2d& operator=(const CudnnPool2d&) = delete;

  void forward(const CudnnHandle& cudnn, const void* x, void* y, cudaStream_t stream);
  // dx (overwritten) from the forward's x and y and the gradient dy.
  void backward(const CudnnHandle& cudnn, const void* x, const void* y, const void* dy, void* dx,
                cudaStream_t stream);

 private:
  struct Descriptors;
  kernels::Pool2dGeometry geometry_;
  int device_;
  std::unique_ptr<Descriptors> descriptors_;
};

}  // namespace aiacc::cuda
