// ReLU kernels: values, the kink at exactly 0 (gradient 0, like PyTorch), NaN, in-place use,
// the multi-threaded path, and finite differences away from the kink.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/kernels/activation.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

using testing::gradients_close;
using testing::numeric_gradient;
using testing::random_values;

TEST(DenseRelu, ForwardAndBackwardAtTheKink) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {-2.0, -0.0, 0.0, 1e-300, 3.5, nan};
  std::vector<double> y(x.size());
  relu_forward<double>(static_cast<std::int64_t>(x.size()), x.data(), y.data());
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(y[3], 1e-300);
  EXPECT_EQ(y[4], 3.5);
  EXPECT_TRUE(std::isnan(y[5]));

  const std::vector<double> dy = {10, 20, 30, 40, 50, 60};
  std::vector<double> dx(x.size(), -1.0);
  relu_backward<double>(static_cast<std::int64_t>(x.size()), y.data(), dy.data(), dx.data());
  // Exactly 0 (either sign) gets gradient 0; the tiny positive input passes it through.
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 40, 50, 0}));
}

TEST(DenseRelu, InPlaceAndMultiThreaded) {
  // Large enough for the OpenMP path; odd so the split is uneven.
  const std::int64_t count = (1 << 17) + 3;
  const auto source = random_values(count, 1);
  std::vector<float> x(source.begin(), source.end());
  std::vector<float> expected(x);
  for (float& v : expected) v = v > 0 ? v : 0.0f;
  relu_forward<float>(count, x.data(), x.data());
  EXPECT_EQ(x, expected);

  std::vector<float> grad(count, 1.0f);
  relu_backward<float>(count, x.data(), grad.data(), grad.data());
  for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(grad[i], x[i] > 0 ? 1.0f : 0.0f) << i;
}

TEST(DenseRelu, GradientMatchesFiniteDifferencesAwayFromTheKink) {
  auto x = random_values(64, 2);
  for (double& v : x) v += v >= 0 ? 0.01 : -0.01;  // keep every input 0.01 from the kink
  const auto dy = random_values(64, 3);
  std::vector<double> y(x.size());
  auto loss = [&] {
    relu_forward<double>(64, x.data(), y.data());
    return std::inner_product(y.begin(), y.end(), dy.begin(), 0.0);
  };
  loss();
  std::vector<double> dx(x.size());
  relu_backward<double>(64, y.data(), dy.data(), dx.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x)));
}

}  // namespace
}  // namespace aiacc::kernels
