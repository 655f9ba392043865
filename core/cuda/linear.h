// The fully connected layer on the GPU through cuBLAS: the math of core/kernels/linear.h
// (row-major, y = x w^T + b) on device memory, in fp32 or with bf16 inputs and fp32
// accumulation and outputs (Tensor Cores; the mixed-precision path keeps fp32 master weights
// and hands a bf16 copy in). Legend: N = batch, I = in_features, O = out_features.
// Built only with CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/cuda/library_handle.h"
#include "core/kernels/linear.h"
#include "core/util/half.h"

namespace aiacc::cuda {

// A cuBLAS handle on the current device (LibraryHandle).
struct CublasTraits {
  using handle = cublasHandle_t;
  static handle create();                                 // throws CudaError
  static void destroy(handle h) noexcept;                 // logs failures
  static void set_stream(handle h, cudaStream_t stream);  // throws CudaError
};
using CublasHandle = LibraryHandle<CublasTraits>;

// y[N, O] = x[N, I] * w[O, I]^T + b[O] (b may be null). T: float or BFloat16 (x and w).
template <class T>
void linear_forward(const CublasHandle& cublas, const kernels::LinearGeometry& g, const T* x,
                    const T* w, const float* b, float* y, cudaStream_t stream);

// dx[N, I] = dy w, dw[O, I] = dy^T x, db[O] = column sums of dy; each may be null, the others
// are overwritten. T: float or BFloat16 (x, w and dy).
template <class T>
void linear_backward(const CublasHandle& cublas, const kernels::LinearGeometry& g, const T* x,
                     const T* w, const T* dy, float* dx, float* dw, float* db, cudaStream_t stream);

}  // namespace aiacc::cuda
