// Bias kernels: one thread per element for the add; one thread per column for the gradient,
// so neighbouring threads read neighbouring columns of each row (coalesced).
#include "core/cuda/kernels/bias.h"

#include <cuda_bf16.h>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, std::int64_t rows,
                                std::int64_t cols) {
  const std::int64_t total = rows * cols;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{blockDim.x} * gridDim.x) {
    y[e] += b[e % cols];
  }
}

template <class D>
__global__ void bias_grad_kernel(const D* __restrict__ dy, float* __restrict__ db, std::int64_t rows,
                                 std::int64_t cols) {
  for (std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += std::int64_t{blockDim.x} * gridDim.x) {
    double sum = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) sum += detail::widen(dy[r * cols + c]);
    db[c] = static_cast<float>(sum);
  }
}

}  // namespace

void launch_add_bias_rows(float* y, const float* b, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream) {
  if (rows * cols <= 0) return;
  add_bias_kernel<<<detail::blocks_for(rows * cols), detail::kThreads, 0, stream>>>(y, b, rows, cols);
  AIACC_CHECK_LAUNCH();
}

template <class T>
void launch_bias_grad_rows(const T* dy, float* db, std::int64_t rows, std::int64_t cols,
                           cudaStream_t stream) {
  if (cols <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  bias_grad_kernel<D><<<detail::blocks_for(cols), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const D*>(dy), db, rows, cols);
  AIACC_CHECK_LAUNCH();
}

template void launch_bias_grad_rows<float>(const float*, float*, std::int64_t, std::int64_t, cudaStream_t);
template void launch_bias_grad_rows<BFloat16>(const BFloat16*, float*, std::int64_t, std::int64_t, cudaStream_t);

}  // namespace aiacc::cuda
