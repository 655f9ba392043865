// ReLU kernels: grid-stride loops, compare in float.
#include "core/cuda/kernels/activation.h"

#include <cuda_bf16.h>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

template <class D>
__global__ void relu_forward_kernel(const D* x, D* y, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const D v = x[i];
    y[i] = detail::widen(v) < 0.0f ? D(0.0f) : v;  // `<` keeps NaN
  }
}

template <class D>
__global__ void relu_backward_kernel(const D* y, const D* dy, D* dx, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    dx[i] = detail::widen(y[i]) > 0.0f ? dy[i] : D(0.0f);
  }
}

}  // namespace

template <class T>
void launch_relu_forward(const T* x, T* y, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  relu_forward_kernel<D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const D*>(x), reinterpret_cast<D*>(y), count);
  AIACC_CHECK_LAUNCH();
}

template <class T>
void launch_relu_backward(const T* y, const T* dy, T* dx, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  relu_backward_kernel<D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      reinterpret_cast<const D*>(y), reinterpret_cast<const D*>(dy), reinterpret_cast<D*>(dx), count);
  AIACC_CHECK_LAUNCH();
}

template void launch_relu_forward<float>(const float*, float*, std::int64_t, cudaStream_t);
template void launch_relu_forward<BFloat16>(const BFloat16*, BFloat16*, std::int64_t, cudaStream_t);
template void launch_relu_backward<float>(const float*, const float*, float*, std::int64_t, cudaStream_t);
template void launch_relu_backward<BFloat16>(const BFloat16*, const BFloat16*, BFloat16*, std::int64_t, cudaStream_t);
template void launch_relu_forward<Half>(const Half*, Half*, std::int64_t, cudaStream_t);
template void launch_relu_backward<Half>(const Half*, const Half*, Half*, std::int64_t, cudaStream_t);

}  // namespace aiacc::cuda
