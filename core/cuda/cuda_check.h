// Status checks for the GPU libraries: each turns a failed status into a CudaError carrying the
// call text, the library's own error string and the source location. Built only with CUDA.
//   AIACC_CUDA_CHECK(cudaMemcpy(...));   AIACC_CUBLAS_CHECK(cublasSgemm(...));
//   AIACC_CUDNN_CHECK(cudnnCreate(&h));  AIACC_NCCL_CHECK(ncclAllReduce(...));
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#if defined(AIACC_HAVE_CUDNN)
#include <cudnn.h>
#endif
#if defined(AIACC_HAVE_NCCL)
#include <nccl.h>
#endif

namespace aiacc::detail {

[[noreturn]] void throw_cuda_failure(const char* file, int line, const char* expression,
                                     cudaError_t status);
[[noreturn]] void throw_cublas_failure(const char* file, int line, const char* expression,
                                       cublasStatus_t status);
#if defined(AIACC_HAVE_CUDNN)
[[noreturn]] void throw_cudnn_failure(const char* file, int line, const char* expression,
                                      cudnnStatus_t status);
#endif
#if defined(AIACC_HAVE_NCCL)
[[noreturn]] void throw_nccl_failure(const char* file, int line, const char* expression,
                                     ncclResult_t status);
#endif

}  // namespace aiacc::detail

#define AIACC_CUDA_CHECK(expression)                                                   \
  do {                                                                                 \
    cudaError_t aiacc_status_ = (expression);                                          \
    if (aiacc_status_ != cudaSuccess) [[unlikely]]                                     \
      ::aiacc::detail::throw_cuda_failure(__FILE__, __LINE__, #expression, aiacc_status_); \
  } while (0)

#define AIACC_CUBLAS_CHECK(expression)                                                 \
  do {                                                                                 \
    cublasStatus_t aiacc_status_ = (expression);                                       \
    if (aiacc_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                           \
      ::aiacc::detail::throw_cublas_failure(__FILE__, __LINE__, #expression, aiacc_status_); \
  } while (0)

#define AIACC_CUDNN_CHECK(expression)                                                  \
  do {                                                                                 \
    cudnnStatus_t aiacc_status_ = (expression);                                        \
    if (aiacc_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                            \
      ::aiacc::detail::throw_cudnn_failure(__FILE__, __LINE__, #expression, aiacc_status_); \
  } while (0)

#define AIACC_NCCL_CHECK(expression)                                                   \
  do {                                                                                 \
    ncclResult_t aiacc_status_ = (expression);                                         \
    if (aiacc_status_ != ncclSuccess && aiacc_status_ != ncclInProgress) [[unlikely]]  \
      ::aiacc::detail::throw_nccl_failure(__FILE__, __LINE__, #expression, aiacc_status_); \
  } while (0)
