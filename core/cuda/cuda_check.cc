#include "core/cuda/cuda_check.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace aiacc::detail {

namespace {
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_cuda_failure(const char* file, int line, const char* expression, cudaError_t status) {
  throw CudaError(fmt::format("{} failed: {} ({}) at {}:{}", expression, cudaGetErrorString(status),
                              cudaGetErrorName(status), base_name(file), line));
}

void throw_cublas_failure(const char* file, int line, const char* expression,
                          cublasStatus_t status) {
  throw CudaError(fmt::format("{} failed: {} ({}) at {}:{}", expression,
                              cublasGetStatusString(status), cublasGetStatusName(status),
                              base_name(file), line));
}

#if defined(AIACC_HAVE_CUDNN)
void throw_cudnn_failure(const char* file, int line, const char* expression, cudnnStatus_t status) {
  throw CudaError(fmt::format("{} failed: {} at {}:{}", expression, cudnnGetErrorString(status),
                              base_name(file), line));
}
#endif

#if defined(AIACC_HAVE_NCCL)
void throw_nccl_failure(const char* file, int line, const char* expression, ncclResult_t status) {
  throw CudaError(fmt::format("{} failed: {} at {}:{}", expression, ncclGetErrorString(status),
                              base_name(file), line));
}
#endif

}  // namespace aiacc::detail
