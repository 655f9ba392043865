// Element-wise add and add + ReLU: grid-stride loops over fp32.
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

}  // namespace

void launch_add(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream) {
  launch<false>(a, b, y, count, stream);
}

void launch_add_relu(const float* a, const float* b, float* y, std::int64_t count, cudaStream_t stream) {
  launch<true>(a, b, y, count, stream);
}

}  // namespace aiacc::cuda
