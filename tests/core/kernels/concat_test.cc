// Concat/split along the feature axis against naive indexing, finite differences in float64,
// and the Tensor helpers' shape checks.
#include "core/kernels/concat.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

TEST(ConcatKernel, MatchesNaiveIndexing) {
  for (std::int64_t batch : {1, 5, 300}) {
    const std::vector<std::int64_t> widths = {3, 0, 1, 17};
    std::vector<std::vector<double>> inputs;
    std::vector<const double*> pointers;
    for (std::size_t k = 0; k < widths.size(); ++k) {
      inputs.push_back(random_values(batch * widths[k], 50 + k));
      pointers.push_back(inputs.back().data());
    }
    std::vector<double> out(batch * 21);
    concat_columns<double>(batch, pointers, widths, out.data());
    for (std::int64_t i = 0; i < batch; ++i) {
      std::int64_t column = 0;
      for (std::size_t k = 0; k < widths.size(); ++k) {
        for (std::int64_t j = 0; j < widths[k]; ++j, ++column) {
          ASSERT_EQ(out[i * 21 + column], inputs[k][i * widths[k] + j])
              << i << " " << k << " " << j;
        }
      }
    }
    // split is the exact inverse; a null gradient is skipped.
    std::vector<std::vector<double>> grads;
    for (std::int64_t w : widths) grads.emplace_back(batch * w, -1.0);
    std::vector<double*> grad_pointers = {grads[0].data(), grads[1].data(), nullptr,
                                          grads[3].data()};
    split_columns<double>(batch, out.data(), widths, grad_pointers);
    EXPECT_EQ(grads[0], inputs[0]);
    EXPECT_EQ(grads[3], inputs[3]);
    EXPECT_EQ(grads[2], std::vector<double>(batch, -1.0));
  }
}

TEST(ConcatKernel, BackwardMatchesFiniteDifferences) {
  const std::int64_t batch = 3;
  const std::vector<std::int64_t> widths = {2, 5};
  auto a = random_values(batch * 2, 61), b = random_values(batch * 5, 62);
  const auto w = random_values(batch * 7, 63);
  std::vector<double> out(batch * 7);
  auto loss = [&] {
    const std::vector<const double*> pointers = {a.data(), b.data()};
    concat_columns<double>(batch, pointers, widths, out.data());
    double total = 0;
    for (std::size_t k = 0; k < out.size(); ++k) total += w[k] * out[k] * out[k];
    return total;
  };
  loss();
  std::vector<double> dout(out.size());
  for (std::size_t k = 0; k < out.size(); ++k) dout[k] = 2 * w[k] * out[k];
  std::vector<double> da(a.size()), db(b.size());
  const std::vector<double*> grads = {da.data(), db.data()};
  split_columns<double>(batch, dout.data(), widths, grads);
  EXPECT_TRUE(gradients_close(da, numeric_gradient(loss, a)));
  EXPECT_TRUE(gradients_close(db, numeric_gradient(loss, b)));
}

TEST(ConcatKernel, TensorHelpersRoundTripAndCheckShapes) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector<float>({5, 6}, {2, 1});
  const std::vector<Tensor> inputs = {a, b};
  const Tensor joined = concat_features(inputs);
  EXPECT_EQ(joined.shape(), (Shape{2, 3}));
  EXPECT_EQ(joined.to_vector<float>(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  const std::vector<std::int64_t> widths = {2, 1};
  const auto parts = split_features(joined, widths);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(parts[1].to_vector<float>(), b.to_vector<float>());

  const std::vector<Tensor> wrong_batch = {a, Tensor::zeros({3, 1})};
  EXPECT_THROW(concat_features(wrong_batch), InternalError);
  const std::vector<Tensor> wrong_dtype = {a, Tensor::zeros({2, 1}, DType::f64)};
  EXPECT_THROW(concat_features(wrong_dtype), InternalError);
  const std::vector<std::int64_t> bad_widths = {2, 2};
  EXPECT_THROW(split_features(joined, bad_widths), InternalError);
}

}  // namespace
}  // namespace aiacc::kernels
