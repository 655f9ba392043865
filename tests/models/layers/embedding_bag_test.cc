// EmbeddingBag layer: lookups fold ids onto the table, rows initialise deterministically per
// (seed, row), the sparse gradient lists each touched row once and matches finite differences
// in float64, and the Layer-style contract (grad_ready once, gradients overwritten) holds.
#include "models/layers/embedding_bag.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

EmbeddingBagOptions options(std::int64_t rows, std::int64_t dim, kernels::BagMode mode,
                            DType dtype = DType::f64) {
  EmbeddingBagOptions o;
  o.num_rows = rows;
  o.dim = dim;
  o.mode = mode;
  o.init_scale = 0.5;
  o.seed = 9;
  o.dtype = dtype;
  return o;
}

TEST(EmbeddingBagLayer, ForwardLooksUpFoldedIds) {
  EmbeddingBag bag("emb", options(5, 3, kernels::BagMode::mean));
  EXPECT_EQ(bag.table().name(), "emb.weight");
  EXPECT_EQ(bag.table().kind(), ParamKind::sparse);
  EXPECT_EQ(bag.table().value().shape(), (Shape{5, 3}));
  // Ids 7 and -3 fold onto rows 7 % 5 = 2 and (2^64 - 3) % 5 = 3.
  const SparseField field{{7, 2, -3, 0}, {0, 2, 2, 4}};
  const Tensor out = bag.forward(field);
  ASSERT_EQ(out.shape(), (Shape{3, 3}));
  const double* t = bag.table().value().data<double>();
  const auto y = out.to_vector<double>();
  EXPECT_EQ(bag.row_of(-3), 3);
  for (int j = 0; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(y[j], (t[2 * 3 + j] + t[2 * 3 + j]) / 2);  // ids 7 and 2: row 2 twice
    EXPECT_EQ(y[3 + j], 0.0);                                   // empty bag
    EXPECT_DOUBLE_EQ(y[6 + j], (t[3 * 3 + j] + t[0 * 3 + j]) / 2);
  }
  EXPECT_EQ(bag.dedup().unique_ids, (std::vector<std::int64_t>{2, 3, 0}));
}

TEST(EmbeddingBagLayer, RowsInitialiseFromSeedAndRowOnly) {
  EmbeddingBag small("a", options(4, 6, kernels::BagMode::sum));
  EmbeddingBag large("b", options(100, 6, kernels::BagMode::sum));
  const auto s = small.table().value().to_vector<double>();
  const auto l = large.table().value().to_vector<double>();
  EXPECT_TRUE(std::equal(s.begin(), s.end(), l.begin()));
  for (double v : l) {
    EXPECT_GE(v, -0.5);
    EXPECT_LT(v, 0.5);
  }
  EXPECT_NE(s[0], s[6]);  // rows differ
}

TEST(EmbeddingBagLayer, SparseGradientMatchesFiniteDifferences) {
  for (kernels::BagMode mode : {kernels::BagMode::sum, kernels::BagMode::mean}) {
    EmbeddingBag bag("emb", options(7, 4, mode));
    const SparseField field{{3, 10, 3, 5, 4, 12, 3}, {0, 3, 3, 4, 7}};  // 10 and 3 share row 3
    const Tensor w = Tensor::from_vector<double>(random_values(16, 1), {4, 4});
    auto loss = [&] {
      const Tensor y = bag.forward(field);
      double total = 0;
      for (std::int64_t k = 0; k < y.numel(); ++k)
        total += w.data<double>()[k] * y.data<double>()[k];
      return total;
    };
    const auto numeric = numeric_gradient(loss, bag.table().value().span<double>());
    loss();
    bag.backward(w);
    const SparseGrad& grad = bag.table().sparse_grad();
    EXPECT_EQ(grad.ids, (std::vector<std::int64_t>{3, 5, 4}));
    ASSERT_EQ(grad.rows.shape(), (Shape{3, 4}));
    // Scatter the sparse rows into a dense [R, D] gradient; untouched rows stay zero.
    std::vector<double> dense(7 * 4, 0.0);
    for (std::size_t u = 0; u < grad.ids.size(); ++u)
      for (int j = 0; j < 4; ++j) dense[grad.ids[u] * 4 + j] = grad.rows.data<double>()[u * 4 + j];
    EXPECT_TRUE(gradients_close(dense, numeric));
  }
}

TEST(EmbeddingBagLayer, GradReadyOnceAndGradientOverwritten) {
  EmbeddingBag bag("emb", options(50, 8, kernels::BagMode::sum, DType::f32));
  int fired = 0;
  bag.table().add_grad_ready_hook([&fired](Parameter&) { ++fired; });
  const SparseField field{{1, 2, 3, 1, 49}, {0, 2, 5}};
  const Tensor dy = Tensor::full({2, 8}, 1.0);
  bag.forward(field);
  bag.backward(dy);
  EXPECT_EQ(fired, 1);
  const auto first = bag.table().sparse_grad().rows.to_vector<float>();
  bag.forward(field);
  bag.backward(dy);
  EXPECT_EQ(fired, 2);
  EXPECT_EQ(bag.table().sparse_grad().rows.to_vector<float>(), first);
  EXPECT_EQ(first[0], 2.0f);  // id 1 appears in both bags
}

TEST(EmbeddingBagLayer, RejectsMalformedInput) {
  EmbeddingBag bag("emb9", options(5, 2, kernels::BagMode::sum));
  EXPECT_THROW(bag.backward(Tensor::zeros({1, 2}, DType::f64)), InternalError);  // no forward
  EXPECT_THROW(bag.forward(SparseField{{1, 2}, {0, 1}}), InternalError);  // offsets end early
  EXPECT_THROW(bag.forward(SparseField{{1, 2}, {}}), InternalError);
  bag.forward(SparseField{{1, 2}, {0, 1, 2}});
  EXPECT_THROW(bag.backward(Tensor::zeros({2, 3}, DType::f64)), InternalError);
  EXPECT_THROW(EmbeddingBag("bad", options(0, 2, kernels::BagMode::sum)), InternalError);
}

}  // namespace
}  // namespace aiacc::models
