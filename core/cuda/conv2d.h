// 2-D convolution on the GPU through cuDNN: the math of core/kernels/conv2d.h (cross-correlation,
// stride, zero padding; bias is a separate broadcast) for NCHW or NHWC ("channels last", the
// Tensor Cores' layout) tensors of fp32, bf16 or fp16, accumulated in fp32.
//
// Set up once per shape (descriptors), run every step. The first run of each direction picks
// its algorithm by benchmarking cuDNN's candidates (cudnnFind*AlgorithmEx) within the workspace
// limit; the choice is kept per (shape, dtype, layout, math, device) for the whole process, so
// every later layer of the same shape starts with it. Workspaces come from
// cuda::device_allocator, so steady steps never call cudaMalloc.
// Legend and shapes as in core/kernels/conv2d.h; with NHWC, x is [N, H, W, C], w [O, KH, KW, C]
// and y [N, OH, OW, O]. Built only with cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/cuda/cudnn_handle.h"
#include "core/cuda/tensor_layout.h"
#include "core/kernels/conv2d.h"
#include "core/tensor.h"

namespace aiacc::cuda {

struct CudnnConvOptions {
  DType dtype = DType::f32;        // storage of x, w, y: f32, bf16 or f16
  TensorLayout layout = TensorLayout::nchw;
  // Algorithms that need more workspace are not considered (PyTorch leaves it unbounded; a
  // bound keeps a large convolution from evicting the activations of the rest of the step).
  std::size_t workspace_limit = std::size_t{256} << 20;
  // fp32 convolutions may run on TF32 Tensor Cores (10-bit mantissa inputs), as PyTorch's
  // default allows. Off: plain fp32 FMA math (bit-closer to the CPU).
  bool allow_tf32 = true;
};

class CudnnConv2d {
 public:
  // Validates the geometry (InternalError) and the options (ConfigError: dtype), builds the
  // descriptors on `device`; throws CudaError from cuDNN.
  CudnnConv2d(const kernels::Conv2dGeometry& geometry, CudnnConvOptions options, int device);
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  // y = conv(x, w) (overwritten). All pointers are device memory in the configured dtype/layout.
  void forward(const CudnnHandle& cudnn, const void* x, const void* w, void* y, cudaStream_t stream);
  // dx = dL/dx given w and dy (overwritten).
  void backward_data(const CudnnHandle& cudnn, const void* w, const void* dy, void* dx,
                     cudaStream_t stream);
  // dw = dL/dw given x and dy, summed over the batch (overwritten).
  void backward_weight(const CudnnHandle& cudnn, const void* x, const void* dy, void* dw,
                       cudaStream_t stream);

  const kernels::Conv2dGeometry& geometry() const { return geometry_; }
  // "N=.. C=.. ... bf16 nhwc: forward algo 1 (0 B), data algo 1 (..), weight algo 3 (..)";
  // directions not run yet read "not chosen".
  std::string describe() const;

 private:
  struct Descriptors;
  kernels::Conv2dGeometry geometry_;
  CudnnConvOptions options_;
  int device_;
  std::unique_ptr<Descriptors> descriptors_;
};

}  // namespace aiacc::cuda
