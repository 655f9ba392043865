// LambRule: the trust ratio on a hand-computable first step and a float64 transcription of the
// LAMB paper's Algorithm 2 (bias-corrected, no clamp) over several steps.
#include "core/optim/lamb.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;
using testing::to_double;

TEST(Lamb, FirstStepTrustRatioIsWeightNormOverSignNorm) {
  // At t=1 without decay, u = g/(|g| + eps) ~ sign(g): ||u|| = sqrt(2), ||w|| = 5.
  const LambRule rule{0.9, 0.999, 1e-6, 0.0};
  std::vector<float> w = {3.0f, 4.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g = {0.5f, -2.0f};
  const SquaredNorms norms = rule.advance_moments(w, g, m, v, 1);
  EXPECT_DOUBLE_EQ(norms.weights, 25.0);
  EXPECT_NEAR(norms.other, 2.0, 1e-5);
  const double trust = rule.trust_ratio(std::sqrt(norms.weights), std::sqrt(norms.other));
  EXPECT_NEAR(trust, 5.0 / std::sqrt(2.0), 1e-5);
  rule.apply(w, m, v, 1, 0.01, trust);  // each coordinate moves by lr*trust*sign(g)
  EXPECT_NEAR(w[0], 3.0 - 0.01 * 5.0 / std::sqrt(2.0), 1e-5);
  EXPECT_NEAR(w[1], 4.0 + 0.01 * 5.0 / std::sqrt(2.0), 1e-5);
  EXPECT_EQ(rule.trust_ratio(0.0, 3.0), 1.0);
  EXPECT_EQ(rule.trust_ratio(3.0, 0.0), 1.0);
}

TEST(Lamb, MatchesFloat64ReferenceOverSteps) {
  const double b1 = 0.85, b2 = 0.97, eps = 1e-3, wd = 0.1, lr = 0.02;
  const LambRule rule{b1, b2, eps, wd};
  const std::size_t n = 60;
  std::vector<float> w = random_vector(n, 9, 1.0), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> w_ref = to_double(w), m_ref(n, 0.0), v_ref(n, 0.0), u(n);
  for (int t = 1; t <= 15; ++t) {
    const std::vector<float> g = random_vector(n, 600 + t, 0.2);
    const SquaredNorms norms = rule.advance_moments(w, g, m, v, t);
    rule.apply(w, m, v, t, lr, rule.trust_ratio(std::sqrt(norms.weights), std::sqrt(norms.other)));
    double w_sq = 0, u_sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      m_ref[i] = b1 * m_ref[i] + (1 - b1) * g[i];
      v_ref[i] = b2 * v_ref[i] + (1 - b2) * double(g[i]) * g[i];
      const double m_hat = m_ref[i] / (1 - std::pow(b1, t));
      const double v_hat = v_ref[i] / (1 - std::pow(b2, t));
      u[i] = m_hat / (std::sqrt(v_hat) + eps) + wd * w_ref[i];
      w_sq += w_ref[i] * w_ref[i];
      u_sq += u[i] * u[i];
    }
    const double trust = std::sqrt(w_sq) / std::sqrt(u_sq);
    for (std::size_t i = 0; i < n; ++i) w_ref[i] -= lr * trust * u[i];
  }
  expect_close(w, w_ref, 1e-5, "lamb weights");
  expect_close(m, m_ref, 1e-5, "lamb exp_avg", 1e-3);
}

}  // namespace
}  // namespace aiacc::optim
