// Slot gather and scatter: one thread per float, so a row's floats are neighbours (coalesced).
#include "core/cuda/kernels/row_cache.h"

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

// dst[dst_row(i), j] = src[src_row(i), j] over count x dim elements.
template <bool kGather, class Index>
__global__ void move_rows_kernel(const float* __restrict__ src, const Index* __restrict__ slots,
                                 std::int64_t count, std::int64_t dim, float* __restrict__ dst) {
  const std::int64_t total = count * dim;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t i = e / dim;
    const std::int64_t j = e - i * dim;
    const std::int64_t slot = slots[i];
    if constexpr (kGather) {
      dst[e] = src[slot * dim + j];
    } else {
      dst[slot * dim + j] = src[e];
    }
  }
}

}  // namespace

void launch_gather_slots(const float* table, const std::int32_t* slot_of, std::int64_t count, std::int64_t dim,
                         float* out, cudaStream_t stream) {
  if (count * dim <= 0) return;
  move_rows_kernel<true, std::int32_t>
      <<<detail::blocks_for(count * dim), detail::kThreads, 0, stream>>>(table, slot_of, count, dim, out);
  AIACC_CHECK_LAUNCH();
}

namespace {

template <class Index>
void scatter(const float* rows, const Index* slots, std::int64_t count, std::int64_t dim, float* table,
             cudaStream_t stream) {
  if (count * dim <= 0) return;
  move_rows_kernel<false, Index>
      <<<detail::blocks_for(count * dim), detail::kThreads, 0, stream>>>(rows, slots, count, dim, table);
  AIACC_CHECK_LAUNCH();
}

}  // namespace

void launch_scatter_to_slots(const float* rows, const std::int32_t* slots, std::int64_t count, std::int64_t dim,
                             float* table, cudaStream_t stream) {
  scatter(rows, slots, count, dim, table, stream);
}

void launch_scatter_to_slots(const float* rows, const std::int64_t* slots, std::int64_t count, std::int64_t dim,
                             float* table, cudaStream_t stream) {
  scatter(rows, slots, count, dim, table, stream);
}

}  // namespace aiacc::cuda
