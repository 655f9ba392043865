// Embedding-bag kernels: one thread per output element (bag or row, column), so the D
// columns of a row are read by neighbouring threads (coalesced), in grid-stride loops.
#include "core/cuda/kernels/embedding_bag.h"

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

__device__ float bag_scale(bool mean, std::int64_t bag_size) {
  // The CPU computes 1.0 / size in double and rounds it to float: the same value here.
  return mean && bag_size > 0 ? static_cast<float>(1.0 / static_cast<double>(bag_size)) : 1.0f;
}

__global__ void forward_kernel(std::int64_t batch, std::int64_t dim, bool mean,
                               const float* __restrict__ unique_rows,
                               const std::int64_t* __restrict__ indices,
                               const std::int64_t* __restrict__ offsets, float* __restrict__ out,
                               std::int64_t out_stride) {
  const std::int64_t total = batch * dim;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t i = e / dim;
    const std::int64_t j = e - i * dim;
    float sum = 0.0f;
    for (std::int64_t p = offsets[i]; p < offsets[i + 1]; ++p) sum += unique_rows[indices[p] * dim + j];
    const float scale = bag_scale(mean, offsets[i + 1] - offsets[i]);
    out[i * out_stride + j] = scale != 1.0f ? sum * scale : sum;
  }
}

__global__ void backward_kernel(std::int64_t num_unique, std::int64_t dim, bool mean,
                                const float* __restrict__ grad_out, std::int64_t grad_stride,
                                const std::int64_t* __restrict__ row_start,
                                const std::int64_t* __restrict__ bag_of,
                                const std::int64_t* __restrict__ offsets,
                                float* __restrict__ grad_unique_rows) {
  const std::int64_t total = num_unique * dim;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t u = e / dim;
    const std::int64_t j = e - u * dim;
    float sum = 0.0f;
    for (std::int64_t k = row_start[u]; k < row_start[u + 1]; ++k) {
      const std::int64_t i = bag_of[k];
      sum += bag_scale(mean, offsets[i + 1] - offsets[i]) * grad_out[i * grad_stride + j];
    }
    grad_unique_rows[e] = sum;
  }
}

}  // namespace

void launch_embedding_bag_forward(const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                                  const float* unique_rows, const std::int64_t* indices,
                                  const std::int64_t* offsets, float* out, std::int64_t out_stride,
                                  cudaStream_t stream) {
  g.validate();
  const std::int64_t total = g.batch * g.dim;
  if (total == 0) return;
  forward_kernel<<<detail::blocks_for(total), detail::kThreads, 0, stream>>>(
      g.batch, g.dim, mode == kernels::BagMode::mean, unique_rows, indices, offsets, out, out_stride);
  AIACC_CHECK_LAUNCH();
}

void launch_embedding_bag_backward(const kernels::EmbeddingBagGeometry& g, kernels::BagMode mode,
                                   const float* grad_out, std::int64_t grad_stride,
                                   const std::int64_t* row_start, const std::int64_t* bag_of,
                                   const std::int64_t* offsets, float* grad_unique_rows, cudaStream_t stream) {
  g.validate();
  const std::int64_t total = g.num_unique * g.dim;
  if (total == 0) return;
  backward_kernel<<<detail::blocks_for(total), detail::kThreads, 0, stream>>>(
      g.num_unique, g.dim, mode == kernels::BagMode::mean, grad_out, grad_stride, row_start, bag_of, offsets,
      grad_unique_rows);
  AIACC_CHECK_LAUNCH();
}

}  // namespace aiacc::cuda
