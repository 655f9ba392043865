// Embedding-bag kernels (see embedding_bag.h). Forward parallelises over examples (each owns
// its output row); backward transposes the CSR (position -> row) into (row -> bags) with a
// counting sort (make_backward_plan) so each unique row is summed by one thread, in a fixed order.
#include "core/kernels/embedding_bag.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {

// Below this many row elements moved (256 KiB of float rows), OpenMP fork/join and wake-up
// latency cost more than the copies save.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 16;

// Checks the CSR offsets and indices so the parallel loops never read out of bounds.
void validate_bags(const EmbeddingBagGeometry& g, const std::int64_t* indices,
                   const std::int64_t* offsets) {
  g.validate();
  AIACC_CHECK_EQ(offsets[0], 0, "embedding bag offsets must start at 0");
  AIACC_CHECK_EQ(offsets[g.batch], g.num_positions, "embedding bag offsets[N] vs positions");
  for (std::int64_t i = 0; i < g.batch; ++i) {
    AIACC_CHECK_LE(offsets[i], offsets[i + 1], "embedding bag offsets decrease at example {}", i);
  }
  for (std::int64_t p = 0; p < g.num_positions; ++p) {
    AIACC_CHECK(indices[p] >= 0 && indices[p] < g.num_unique,
                "embedding bag position {} has unique index {} outside [0, {})", p, indices[p],
                g.num_unique);
  }
}

double bag_scale(BagMode mode, std::int64_t bag_size) {
  return mode == BagMode::mean && bag_size > 0 ? 1.0 / static_cast<double>(bag_size) : 1.0;
}

}  // namespace

void EmbeddingBagGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && num_positions >= 0 && num_unique >= 0 && dim >= 0,
              "embedding bag geometry N={} P={} U={} D={}", batch, num_positions, num_unique, dim);
}

template <class T>
void embedding_bag_forward(const EmbeddingBagGeometry& g, BagMode mode, const T* unique_rows,
                           const std::int64_t* indices, const std::int64_t* offsets, T* out) {
  embedding_bag_forward(g, mode, unique_rows, indices, offsets, out, g.dim);
}

template <class T>
void embedding_bag_forward(const EmbeddingBagGeometry& g, BagMode mode, const T* unique_rows,
                           const std::int64_t* indices, const std::int64_t* offsets, T* out,
                           std::int64_t out_stride) {
  validate_bags(g, indices, offsets);
  AIACC_CHECK_GE(out_stride, g.dim, "embedding bag: output row stride");
  const std::int64_t d = g.dim;
  const bool parallel = (g.num_positions + g.batch) * d >= kMinParallelElements;
  util::parallel_for(std::int64_t{0}, g.batch, parallel, [&](std::int64_t i) {
    T* o = out + i * out_stride;
    std::fill(o, o + d, T(0));
    for (std::int64_t p = offsets[i]; p < offsets[i + 1]; ++p) {
      const T* row = unique_rows + indices[p] * d;
      for (std::int64_t j = 0; j < d; ++j) o[j] += row[j];
    }
    const auto scale = static_cast<T>(bag_scale(mode, offsets[i + 1] - offsets[i]));
    if (scale != T(1)) {
      for (std::int64_t j = 0; j < d; ++j) o[j] *= scale;
    }
  });
}

EmbeddingBagBackwardPlan make_backward_plan(const EmbeddingBagGeometry& g,
                                            const std::int64_t* indices,
                                            const std::int64_t* offsets) {
  validate_bags(g, indices, offsets);
  EmbeddingBagBackwardPlan plan;
  plan.row_start.assign(static_cast<std::size_t>(g.num_unique) + 1, 0);
  for (std::int64_t p = 0; p < g.num_positions; ++p) ++plan.row_start[indices[p] + 1];
  for (std::int64_t u = 0; u < g.num_unique; ++u) plan.row_start[u + 1] += plan.row_start[u];
  std::vector<std::int64_t> fill(plan.row_start.begin(), plan.row_start.end() - 1);
  plan.bag_of.resize(static_cast<std::size_t>(g.num_positions));
  for (std::int64_t i = 0; i < g.batch; ++i) {
    for (std::int64_t p = offsets[i]; p < offsets[i + 1]; ++p) plan.bag_of[fill[indices[p]]++] = i;
  }
  return plan;
}

template <class T>
void embedding_bag_backward(const EmbeddingBagGeometry& g, BagMode mode, const T* grad_out,
                            const std::int64_t* indices, const std::int64_t* offsets,
                            T* grad_unique_rows) {
  const EmbeddingBagBackwardPlan plan = make_backward_plan(g, indices, offsets);
  embedding_bag_backward_planned(g, mode, grad_out, g.dim, plan.row_start.data(), plan.bag_of.data(), offsets,
                                 grad_unique_rows);
}

template <class T>
void embedding_bag_backward_planned(const EmbeddingBagGeometry& g, BagMode mode, const T* grad_out,
                                    std::int64_t grad_stride, const std::int64_t* row_start,
                                    const std::int64_t* bag_of, const std::int64_t* offsets,
                                    T* grad_unique_rows) {
  g.validate();
  AIACC_CHECK_GE(grad_stride, g.dim, "embedding bag: gradient row stride");
  const std::int64_t d = g.dim;
  const std::int64_t u_count = g.num_unique;
  const bool parallel = (g.num_positions + u_count) * d >= kMinParallelElements;
  // Dynamic chunks: hot ids (a few rows used by most bags) would unbalance a static split.
  util::parallel_for_dynamic(std::int64_t{0}, u_count, std::int64_t{64}, parallel, [&](std::int64_t u) {
    T* grad = grad_unique_rows + u * d;
    std::fill(grad, grad + d, T(0));
    for (std::int64_t k = row_start[u]; k < row_start[u + 1]; ++k) {
      const std::int64_t i = bag_of[k];
      const T* go = grad_out + i * grad_stride;
      const auto scale = static_cast<T>(bag_scale(mode, offsets[i + 1] - offsets[i]));
      for (std::int64_t j = 0; j < d; ++j) grad[j] += scale * go[j];
    }
  });
}

#define AIACC_INSTANTIATE_EMBEDDING_BAG(T)                                                \
  template void embedding_bag_forward<T>(const EmbeddingBagGeometry&, BagMode, const T*,  \
                                         const std::int64_t*, const std::int64_t*, T*);   \
  template void embedding_bag_backward<T>(const EmbeddingBagGeometry&, BagMode, const T*, \
                                          const std::int64_t*, const std::int64_t*, T*);  \
  template void embedding_bag_forward<T>(const EmbeddingBagGeometry&, BagMode, const T*,  \
                                         const std::int64_t*, const std::int64_t*, T*,    \
                                         std::int64_t);                                   \
  template void embedding_bag_backward_planned<T>(                                        \
      const EmbeddingBagGeometry&, BagMode, const T*, std::int64_t, const std::int64_t*,  \
      const std::int64_t*, const std::int64_t*, T*);
AIACC_INSTANTIATE_EMBEDDING_BAG(float)
AIACC_INSTANTIATE_EMBEDDING_BAG(double)
#undef AIACC_INSTANTIATE_EMBEDDING_BAG

}  // namespace aiacc::kernels
