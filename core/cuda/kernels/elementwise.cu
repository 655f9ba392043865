// Element-wise add, add + ReLU and the spread of a mean's gradient: grid-stride loops over fp32.
#include "core/cuda/kernels/elementwise.h"

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

template <bool kRelu>
__global__ void add_kernel(const float* a, const float* b, float* y, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const float sum = a[i] + b[i];
    y[i] = kRelu && sum < 0.0f ? 0.0f : sum;  // `<` keeps NaN
  }
}

template <bool kRelu>
void launch(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  add_kernel<kRelu><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(a, b, y, count);
  AIACC_CHECK_LAUNCH();
}

__global__ void spread_mean_kernel(const float* dy, float* dx, std::int64_t count, std::int64_t spatial,
                                   float inv_spatial) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    dx[i] = dy[i / spatial] * inv_spatial;
  }
}

}  // namespace

void launch_global_avg_pool_backward(const float* dy, float* dx, std::int64_t planes, std::int64_t spatial,
                                     cudaStream_t stream) {
  const std::int64_t count = planes * spatial;
  if (count <= 0) return;
  spread_mean_kernel<<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      dy, dx, count, spatial, 1.0f / static_cast<float>(spatial));
  AIACC_CHECK_LAUNCH();
}

void launch_add(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream) {
  launch<false>(a, b, y, count, stream);
}

void launch_add_relu(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream) {
  launch<true>(a, b, y, count, stream);
}

}  // namespace aiacc::cuda
