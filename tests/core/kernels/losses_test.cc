// Loss kernels against naive formulas (log of softmax computed directly), closed forms
// (uniform logits give log C, zero logits give log 2), overflow safety for large logits,
// finite-difference gradients in float64, and DataError on bad labels.
#include "core/kernels/losses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

// Direct formula: -sum_c q_c * log(exp(x_c) / sum exp(x)), fine for moderate logits.
double reference_cross_entropy(std::int64_t batch, std::int64_t classes,
                               const std::vector<double>& x, const std::vector<std::int64_t>& y,
                               double s) {
  double total = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    double z = 0;
    for (std::int64_t c = 0; c < classes; ++c) z += std::exp(x[i * classes + c]);
    for (std::int64_t c = 0; c < classes; ++c) {
      const double q = s / classes + (c == y[i] ? 1 - s : 0);
      total -= q * std::log(std::exp(x[i * classes + c]) / z);
    }
  }
  return total / batch;
}

TEST(SoftmaxCrossEntropyKernel, MatchesReference) {
  for (auto [batch, classes] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {1, 10}, {7, 3}, {64, 13}, {300, 200}}) {
    for (double s : {0.0, 0.1}) {
      const auto x = random_values(batch * classes, 81, -4.0, 4.0);
      std::vector<std::int64_t> y(batch);
      for (std::int64_t i = 0; i < batch; ++i) y[i] = (i * 7 + 3) % classes;
      const double want = reference_cross_entropy(batch, classes, x, y, s);
      std::vector<double> d(batch * classes);
      EXPECT_NEAR(softmax_cross_entropy<double>(batch, classes, x.data(), y.data(), s, d.data()),
                  want, 1e-12);
      const std::vector<float> xf(x.begin(), x.end());
      std::vector<float> df(batch * classes);
      EXPECT_NEAR(softmax_cross_entropy<float>(batch, classes, xf.data(), y.data(), s, df.data()),
                  want, 1e-5);
      for (std::size_t k = 0; k < d.size(); ++k) ASSERT_NEAR(df[k], d[k], 1e-6);
    }
  }
}

TEST(SoftmaxCrossEntropyKernel, ClosedFormsAndLargeLogits) {
  // Uniform logits: every class has probability 1/C, so the loss is log C for any label.
  const std::vector<double> uniform(2 * 10, 3.7);
  const std::vector<std::int64_t> labels = {0, 9};
  EXPECT_NEAR(softmax_cross_entropy<double>(2, 10, uniform.data(), labels.data(), 0.0, nullptr),
              std::log(10.0), 1e-12);
  // Huge logits would overflow exp() without the max subtraction.
  const std::vector<float> big = {1e4f, 0.0f, -1e4f, 1e4f};
  const std::vector<std::int64_t> second = {1, 1};
  std::vector<float> d(4);
  const double loss = softmax_cross_entropy<float>(2, 2, big.data(), second.data(), 0.0, d.data());
  // Example 0 is certain and wrong by 1e4 (loss 1e4); example 1 is certain and right (loss 0).
  EXPECT_NEAR(loss, 1e4 / 2, 1e-3);
  EXPECT_EQ(d, (std::vector<float>{0.5f, -0.5f, 0.0f, 0.0f}));
}

TEST(SoftmaxCrossEntropyKernel, GradientMatchesFiniteDifferences) {
  for (double s : {0.0, 0.2}) {
    const std::int64_t batch = 4, classes = 5;
    auto x = random_values(batch * classes, 91, -2.0, 2.0);
    const std::vector<std::int64_t> y = {0, 4, 2, 2};
    std::vector<double> d(x.size());
    softmax_cross_entropy<double>(batch, classes, x.data(), y.data(), s, d.data());
    auto loss = [&] {
      return softmax_cross_entropy<double>(batch, classes, x.data(), y.data(), s, nullptr);
    };
    EXPECT_TRUE(gradients_close(d, numeric_gradient(loss, x)));
  }
}

TEST(SoftmaxCrossEntropyKernel, BadLabelThrowsDataErrorNamingExample) {
  const std::vector<double> x(6, 0.0);
  for (std::int64_t bad : {3, -1}) {
    const std::vector<std::int64_t> y = {0, bad};
    try {
      softmax_cross_entropy<double>(2, 3, x.data(), y.data(), 0.0, nullptr);
      FAIL() << "no exception for label " << bad;
    } catch (const DataError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("example 1"), std::string::npos) << message;
      EXPECT_NE(message.find("label " + std::to_string(bad)), std::string::npos) << message;
    }
  }
}

TEST(BinaryCrossEntropyKernel, MatchesNaiveFormulaAndClosedForms) {
  const std::int64_t batch = 33;
  const auto x = random_values(batch, 101, -5.0, 5.0);
  const auto soft = random_values(batch, 102, 0.0, 1.0);
  std::vector<double> t(batch);
  for (std::int64_t i = 0; i < batch; ++i) t[i] = i % 3 == 0 ? soft[i] : i % 2;
  double want = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    const double p = 1 / (1 + std::exp(-x[i]));
    want -= (t[i] * std::log(p) + (1 - t[i]) * std::log(1 - p)) / batch;
  }
  std::vector<double> d(batch);
  EXPECT_NEAR(binary_cross_entropy_with_logits<double>(batch, x.data(), t.data(), d.data()), want,
              1e-12);
  for (std::int64_t i = 0; i < batch; ++i) {
    EXPECT_NEAR(d[i], (1 / (1 + std::exp(-x[i])) - t[i]) / batch, 1e-15);
  }
  // Zero logits: p = 1/2 whatever the target, so the loss is log 2.
  const std::vector<float> zeros(4, 0.0f), targets = {0, 1, 1, 0};
  EXPECT_NEAR(binary_cross_entropy_with_logits<float>(4, zeros.data(), targets.data(), nullptr),
              std::log(2.0), 1e-7);
  // Large logits: right answers cost ~0, wrong ones cost |x|, nothing overflows.
  const std::vector<float> big = {1e4f, -1e4f, 1e4f}, big_t = {1, 0, 0};
  std::vector<float> db(3);
  const double loss =
      binary_cross_entropy_with_logits<float>(3, big.data(), big_t.data(), db.data());
  EXPECT_NEAR(loss, 1e4 / 3, 1e-2);
  EXPECT_NEAR(db[0], 0.0f, 1e-7f);
  EXPECT_NEAR(db[2], 1.0f / 3, 1e-7f);
}

TEST(BinaryCrossEntropyKernel, GradientMatchesFiniteDifferences) {
  const std::int64_t batch = 9;
  auto x = random_values(batch, 111, -3.0, 3.0);
  const std::vector<double> t = {0, 1, 1, 0, 0.3, 1, 0, 1, 0.9};
  std::vector<double> d(batch);
  binary_cross_entropy_with_logits<double>(batch, x.data(), t.data(), d.data());
  auto loss = [&] {
    return binary_cross_entropy_with_logits<double>(batch, x.data(), t.data(), nullptr);
  };
  EXPECT_TRUE(gradients_close(d, numeric_gradient(loss, x)));
}

TEST(BinaryCrossEntropyKernel, BadTargetThrowsDataError) {
  const std::vector<double> x = {0, 0, 0};
  for (double bad : {2.0, -0.5, std::nan("")}) {
    const std::vector<double> t = {0, 1, bad};
    try {
      binary_cross_entropy_with_logits<double>(3, x.data(), t.data(), nullptr);
      FAIL() << "no exception for target " << bad;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("example 2"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace aiacc::kernels
