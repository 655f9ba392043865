// LarsRule: trust ratios on hand-computable vectors and a float64 transcription of the LARS
// paper's Algorithm 1 (lr inside the velocity) over several steps.
#include "core/optim/lars.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;
using testing::to_double;

TEST(Lars, TrustRatioOnHandComputedVectors) {
  const LarsRule rule{0.9, 0.01, 0.001};
  const std::vector<float> w = {3.0f, 4.0f};   // ||w|| = 5
  const std::vector<float> g = {0.6f, -0.8f};  // ||g|| = 1
  const SquaredNorms norms = rule.norms(w, g);
  EXPECT_DOUBLE_EQ(norms.weights, 25.0);
  EXPECT_NEAR(norms.other, 1.0, 1e-7);
  // 0.001 * 5 / (1 + 0.01 * 5)
  EXPECT_NEAR(rule.trust_ratio(5.0, 1.0), 0.005 / 1.05, 1e-15);
  EXPECT_EQ(rule.trust_ratio(0.0, 1.0), 1.0);
  EXPECT_EQ(rule.trust_ratio(5.0, 0.0), 1.0);
}

TEST(Lars, MatchesFloat64ReferenceOverSteps) {
  const double mu = 0.9, wd = 0.05, eta = 0.02;
  const LarsRule rule{mu, wd, eta};
  const std::size_t n = 50;
  std::vector<float> w = random_vector(n, 7, 1.0), vel(n, 0.0f);
  std::vector<double> w_ref = to_double(w), vel_ref(n, 0.0);
  for (int t = 1; t <= 15; ++t) {
    const std::vector<float> g = random_vector(n, 500 + t, 0.1 * t);
    const double lr = 1.0 / t;
    const SquaredNorms norms = rule.norms(w, g);
    rule.update(w, g, vel, lr, rule.trust_ratio(std::sqrt(norms.weights), std::sqrt(norms.other)));
    double w_sq = 0, g_sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      w_sq += w_ref[i] * w_ref[i];
      g_sq += double(g[i]) * g[i];
    }
    const double local_lr = eta * std::sqrt(w_sq) / (std::sqrt(g_sq) + wd * std::sqrt(w_sq));
    for (std::size_t i = 0; i < n; ++i) {
      vel_ref[i] = mu * vel_ref[i] + lr * local_lr * (g[i] + wd * w_ref[i]);
      w_ref[i] -= vel_ref[i];
    }
  }
  expect_close(w, w_ref, 1e-5, "lars weights");
  expect_close(vel, vel_ref, 1e-4, "lars velocity", 1e-5);
}

TEST(Lars, WithoutMomentumTakesTheScaledStep) {
  const LarsRule rule{0.0, 0.0, 0.001};
  EXPECT_EQ(rule.state_per_element(), 0);
  std::vector<float> w = {3.0f, 4.0f};
  rule.update(w, std::vector<float>{0.6f, -0.8f}, {}, 10.0, 0.005);  // lr*trust = 0.05
  EXPECT_NEAR(w[0], 3.0 - 0.05 * 0.6, 1e-6);
  EXPECT_NEAR(w[1], 4.0 + 0.05 * 0.8, 1e-6);
}

}  // namespace
}  // namespace aiacc::optim
