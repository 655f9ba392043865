// Embedding-bag kernels against naive loops (sum and mean, empty bags, batch 1), finite
// differences in float64, and thread-count independence of the backward.
#include "core/kernels/embedding_bag.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "core/error.h"
#include "core/util/random.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

struct Bags {
  EmbeddingBagGeometry g;
  std::vector<std::int64_t> indices, offsets;
};

// N bags of 0..max_bag positions each, indices uniform over U unique rows.
Bags random_bags(std::int64_t batch, std::int64_t max_bag, std::int64_t unique, std::int64_t dim,
                 std::uint64_t seed) {
  Rng rng(seed);
  Bags b;
  b.offsets.push_back(0);
  for (std::int64_t i = 0; i < batch; ++i) {
    const auto size = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(max_bag) + 1));
    for (std::int64_t k = 0; k < size; ++k) {
      b.indices.push_back(static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(unique))));
    }
    b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
  }
  b.g = {batch, static_cast<std::int64_t>(b.indices.size()), unique, dim};
  return b;
}

std::vector<double> reference_forward(const Bags& b, BagMode mode,
                                      const std::vector<double>& rows) {
  const std::int64_t d = b.g.dim;
  std::vector<double> out(b.g.batch * d, 0.0);
  for (std::int64_t i = 0; i < b.g.batch; ++i) {
    const std::int64_t size = b.offsets[i + 1] - b.offsets[i];
    for (std::int64_t p = b.offsets[i]; p < b.offsets[i + 1]; ++p)
      for (std::int64_t j = 0; j < d; ++j) out[i * d + j] += rows[b.indices[p] * d + j];
    if (mode == BagMode::mean && size > 0)
      for (std::int64_t j = 0; j < d; ++j) out[i * d + j] /= size;
  }
  return out;
}

std::vector<double> reference_backward(const Bags& b, BagMode mode, const std::vector<double>& dy) {
  const std::int64_t d = b.g.dim;
  std::vector<double> grad(b.g.num_unique * d, 0.0);
  for (std::int64_t i = 0; i < b.g.batch; ++i) {
    const std::int64_t size = b.offsets[i + 1] - b.offsets[i];
    const double scale = mode == BagMode::mean ? 1.0 / size : 1.0;
    for (std::int64_t p = b.offsets[i]; p < b.offsets[i + 1]; ++p)
      for (std::int64_t j = 0; j < d; ++j) grad[b.indices[p] * d + j] += scale * dy[i * d + j];
  }
  return grad;
}

template <class T>
void check_against_reference(const Bags& b, BagMode mode, double tolerance) {
  const auto rows = random_values(b.g.num_unique * b.g.dim, 21);
  const auto dy = random_values(b.g.batch * b.g.dim, 22);
  const std::vector<T> rows_t(rows.begin(), rows.end()), dy_t(dy.begin(), dy.end());
  std::vector<T> out(b.g.batch * b.g.dim, T(-7)), grad(b.g.num_unique * b.g.dim, T(-7));
  embedding_bag_forward<T>(b.g, mode, rows_t.data(), b.indices.data(), b.offsets.data(),
                           out.data());
  embedding_bag_backward<T>(b.g, mode, dy_t.data(), b.indices.data(), b.offsets.data(),
                            grad.data());
  const auto want_out = reference_forward(b, mode, rows);
  const auto want_grad = reference_backward(b, mode, dy);
  for (std::size_t k = 0; k < out.size(); ++k) ASSERT_NEAR(out[k], want_out[k], tolerance) << k;
  for (std::size_t k = 0; k < grad.size(); ++k) ASSERT_NEAR(grad[k], want_grad[k], tolerance) << k;
}

TEST(EmbeddingBagKernel, MatchesReferenceSumAndMean) {
  for (BagMode mode : {BagMode::sum, BagMode::mean}) {
    // batch 1; odd dims; bags up to 20 (multi-hot); more unique rows than used (zero grads).
    for (const Bags& b : {random_bags(1, 5, 3, 7, 1), random_bags(13, 3, 11, 5, 2),
                          random_bags(37, 20, 50, 16, 3), random_bags(512, 4, 900, 33, 4)}) {
      SCOPED_TRACE(::testing::Message() << "N=" << b.g.batch << " P=" << b.g.num_positions
                                        << " mean=" << (mode == BagMode::mean));
      check_against_reference<double>(b, mode, 1e-12);
      check_against_reference<float>(b, mode, 1e-5);
    }
  }
}

TEST(EmbeddingBagKernel, EmptyBagsGiveZerosAndNoGradient) {
  // Bags: {0, 1}, {}, {1}, {} over U = 3 rows of dim 2; row 2 is never used.
  Bags b{{4, 3, 3, 2}, {0, 1, 1}, {0, 2, 2, 3, 3}};
  const std::vector<double> rows = {1, 2, 10, 20, 100, 200};
  std::vector<double> out(8, -1.0);
  embedding_bag_forward<double>(b.g, BagMode::mean, rows.data(), b.indices.data(), b.offsets.data(),
                                out.data());
  EXPECT_EQ(out, (std::vector<double>{5.5, 11, 0, 0, 10, 20, 0, 0}));
  const std::vector<double> dy = {1, 1, 5, 5, 2, 4, 9, 9};
  std::vector<double> grad(6, -1.0);
  embedding_bag_backward<double>(b.g, BagMode::mean, dy.data(), b.indices.data(), b.offsets.data(),
                                 grad.data());
  EXPECT_EQ(grad, (std::vector<double>{0.5, 0.5, 2.5, 4.5, 0, 0}));
  // An all-empty batch (P = 0) is valid too.
  Bags empty{{2, 0, 0, 2}, {}, {0, 0, 0}};
  std::vector<double> out2(4, -1.0);
  embedding_bag_forward<double>(empty.g, BagMode::sum, rows.data(), empty.indices.data(),
                                empty.offsets.data(), out2.data());
  EXPECT_EQ(out2, std::vector<double>(4, 0.0));
}

TEST(EmbeddingBagKernel, BackwardMatchesFiniteDifferences) {
  for (BagMode mode : {BagMode::sum, BagMode::mean}) {
    const Bags b = random_bags(6, 4, 5, 3, 9);
    auto rows = random_values(b.g.num_unique * b.g.dim, 31);
    const auto w = random_values(b.g.batch * b.g.dim, 32);
    std::vector<double> out(b.g.batch * b.g.dim);
    auto loss = [&] {
      embedding_bag_forward<double>(b.g, mode, rows.data(), b.indices.data(), b.offsets.data(),
                                    out.data());
      double total = 0;
      for (std::size_t k = 0; k < out.size(); ++k) total += w[k] * out[k];
      return total;
    };
    std::vector<double> grad(rows.size());
    embedding_bag_backward<double>(b.g, mode, w.data(), b.indices.data(), b.offsets.data(),
                                   grad.data());
    EXPECT_TRUE(gradients_close(grad, numeric_gradient(loss, rows)));
  }
}

TEST(EmbeddingBagKernel, BackwardIsIndependentOfThreadCount) {
  const Bags b = random_bags(2048, 20, 3000, 32, 5);  // large enough for the OpenMP path
  const auto dy_d = random_values(b.g.batch * b.g.dim, 41);
  const std::vector<float> dy(dy_d.begin(), dy_d.end());
  std::vector<float> one(b.g.num_unique * b.g.dim), many(one.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_bag_backward<float>(b.g, BagMode::sum, dy.data(), b.indices.data(), b.offsets.data(),
                                one.data());
  omp_set_num_threads(std::max(2, omp_get_num_procs()));
  embedding_bag_backward<float>(b.g, BagMode::sum, dy.data(), b.indices.data(), b.offsets.data(),
                                many.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, many);  // bitwise: each row is summed in position order by one thread
}

TEST(EmbeddingBagKernel, RejectsMalformedInput) {
  const std::vector<double> rows(6, 1.0);
  std::vector<double> out(4);
  const std::vector<std::int64_t> bad_index = {0, 3};  // U = 3
  const std::vector<std::int64_t> offsets = {0, 1, 2};
  EXPECT_THROW(embedding_bag_forward<double>({2, 2, 3, 2}, BagMode::sum, rows.data(),
                                             bad_index.data(), offsets.data(), out.data()),
               InternalError);
  const std::vector<std::int64_t> good_index = {0, 1};
  const std::vector<std::int64_t> decreasing = {0, 2, 1};
  EXPECT_THROW(embedding_bag_forward<double>({2, 1, 3, 2}, BagMode::sum, rows.data(),
                                             good_index.data(), decreasing.data(), out.data()),
               InternalError);
}

// The (row -> bags) transpose the CPU and GPU backward share, on a case worked by hand:
// bags {0: [2, 0], 1: [], 2: [0, 0, 3]} over 4 unique rows (row 1 unused).
TEST(EmbeddingBagKernel, BackwardPlanListsEachRowsBagsInPositionOrder) {
  const std::vector<std::int64_t> indices{2, 0, 0, 0, 3};
  const std::vector<std::int64_t> offsets{0, 2, 2, 5};
  EmbeddingBagGeometry g;
  g.batch = 3;
  g.num_positions = 5;
  g.num_unique = 4;
  g.dim = 1;
  const EmbeddingBagBackwardPlan plan = make_backward_plan(g, indices.data(), offsets.data());
  EXPECT_EQ(plan.row_start, (std::vector<std::int64_t>{0, 3, 3, 4, 5}));
  EXPECT_EQ(plan.bag_of, (std::vector<std::int64_t>{0, 2, 2, 0, 2}));
  const std::vector<std::int64_t> bad_indices{2, 0, 0, 0, 4};  // 4 is not a unique row
  EXPECT_THROW(make_backward_plan(g, bad_indices.data(), offsets.data()), InternalError);
}

}  // namespace
}  // namespace aiacc::kernels
