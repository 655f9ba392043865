// Loss wrappers: shapes and dtypes accepted ([N] and [N, 1] logits, f32 targets for f64
// logits), values and gradients consistent with the kernels, and errors on bad inputs.
#include "models/layers/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

TEST(SoftmaxCrossEntropyLoss, UniformLogitsGiveLogClassesAndGradientChecks) {
  SoftmaxCrossEntropy loss;
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 3, 6}, {3});
  EXPECT_NEAR(loss.forward(Tensor::zeros({3, 7}), labels), std::log(7.0), 1e-6);
  const Tensor d = loss.backward();
  EXPECT_EQ(d.shape(), (Shape{3, 7}));
  EXPECT_NEAR(d.data<float>()[0], (1.0 / 7 - 1) / 3, 1e-7);

  SoftmaxCrossEntropy smoothed(0.1);
  Tensor logits = Tensor::from_vector<double>(random_values(21, 5, -2, 2), {3, 7});
  smoothed.forward(logits, labels);
  const auto analytic = smoothed.backward().to_vector<double>();
  const auto numeric =
      numeric_gradient([&] { return smoothed.forward(logits, labels); }, logits.span<double>());
  EXPECT_TRUE(gradients_close(analytic, numeric));
}

TEST(SoftmaxCrossEntropyLoss, RejectsBadInput) {
  SoftmaxCrossEntropy loss;
  EXPECT_THROW(loss.backward(), InternalError);
  const Tensor logits = Tensor::zeros({2, 3});
  EXPECT_THROW(loss.forward(logits, Tensor::from_vector<std::int64_t>({0, 3}, {2})), DataError);
  EXPECT_THROW(loss.backward(), InternalError);  // a rejected batch leaves no gradient
  EXPECT_THROW(loss.forward(logits, Tensor::zeros({2})), InternalError);  // f32 labels
  EXPECT_THROW(loss.forward(logits, Tensor::from_vector<std::int64_t>({0}, {1})), InternalError);
  EXPECT_THROW(SoftmaxCrossEntropy(1.5), InternalError);
}

TEST(BinaryCrossEntropyLoss, AcceptsColumnLogitsAndConvertsTargets) {
  BinaryCrossEntropyWithLogits loss;
  Tensor logits = Tensor::from_vector<double>(random_values(6, 7, -3, 3), {6, 1});
  const Tensor targets = Tensor::from_vector<float>({0, 1, 1, 0, 1, 0}, {6});
  const double value = loss.forward(logits, targets);
  double want = 0;
  for (int i = 0; i < 6; ++i) {
    const double x = logits.data<double>()[i], t = targets.data<float>()[i];
    want += (std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::abs(x)))) / 6;
  }
  EXPECT_NEAR(value, want, 1e-12);
  const Tensor d = loss.backward();
  EXPECT_EQ(d.shape(), (Shape{6, 1}));
  EXPECT_EQ(d.dtype(), DType::f64);
  const auto numeric =
      numeric_gradient([&] { return loss.forward(logits, targets); }, logits.span<double>());
  EXPECT_TRUE(gradients_close(d.to_vector<double>(), numeric));
  EXPECT_NEAR(loss.forward(Tensor::zeros({4}), Tensor::zeros({4})), std::log(2.0), 1e-7);
}

TEST(BinaryCrossEntropyLoss, RejectsBadInput) {
  BinaryCrossEntropyWithLogits loss;
  EXPECT_THROW(loss.forward(Tensor::zeros({3, 2}), Tensor::zeros({3})), InternalError);
  EXPECT_THROW(loss.forward(Tensor::zeros({3}), Tensor::zeros({4})), InternalError);
  EXPECT_THROW(loss.forward(Tensor::zeros({2}), Tensor::from_vector<float>({0, 3}, {2})),
               DataError);
}

}  // namespace
}  // namespace aiacc::models
