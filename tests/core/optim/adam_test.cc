// AdamRule (Adam and AdamW) against a float64 transcription of Kingma & Ba's Algorithm 1 with
// PyTorch's weight-decay variants, plus the first-step magnitude and decoupled decay.
#include "core/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;
using testing::to_double;

struct Moments {
  std::vector<double> m, v;
};

// Adam in double; decoupled (AdamW) shrinks w by lr*wd first, Adam adds wd*w to the gradient.
void reference_adam(std::vector<double>& w, const std::vector<double>& g, Moments& s, double b1,
                    double b2, double eps, double wd, bool decoupled, int t, double lr) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    double grad = g[i];
    if (decoupled) {
      w[i] -= lr * wd * w[i];
    } else {
      grad += wd * w[i];
    }
    s.m[i] = b1 * s.m[i] + (1 - b1) * grad;
    s.v[i] = b2 * s.v[i] + (1 - b2) * grad * grad;
    const double m_hat = s.m[i] / (1 - std::pow(b1, t));
    const double v_hat = s.v[i] / (1 - std::pow(b2, t));
    w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

void run_against_reference(bool decoupled, double eps, double wd) {
  const AdamRule rule{0.8, 0.95, eps, wd, decoupled};
  const std::size_t n = 48;
  std::vector<float> w = random_vector(n, 3, 1.5), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> w_ref = to_double(w);
  Moments s{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int t = 1; t <= 20; ++t) {
    // Small gradients so eps (outside the root) visibly shapes the step.
    const std::vector<float> g = random_vector(n, 200 + t, 0.05);
    rule.update(w, g, m, v, t, 0.01);
    reference_adam(w_ref, to_double(g), s, 0.8, 0.95, eps, wd, decoupled, t, 0.01);
  }
  expect_close(w, w_ref, 2e-5, decoupled ? "adamw weights" : "adam weights");
  expect_close(m, s.m, 2e-5, "exp_avg", 1e-4);
  expect_close(v, s.v, 2e-5, "exp_avg_sq", 1e-6);
}

TEST(Adam, MatchesFloat64ReferenceWithL2Decay) { run_against_reference(false, 1e-2, 0.1); }
TEST(Adam, MatchesFloat64ReferenceTinyEps) { run_against_reference(false, 1e-8, 0.0); }
TEST(AdamW, MatchesFloat64ReferenceWithDecoupledDecay) { run_against_reference(true, 1e-2, 0.3); }

TEST(Adam, FirstStepMovesEachNonzeroCoordinateByLr) {
  // At t=1, m_hat = g and v_hat = g^2, so the step is lr*sign(g) whatever |g| is.
  const AdamRule rule;
  std::vector<float> w = {1.0f, 1.0f, 1.0f, 1.0f}, m(4, 0.0f), v(4, 0.0f);
  const std::vector<float> g = {1e-3f, -5.0f, 0.0f, 200.0f};
  rule.update(w, g, m, v, 1, 0.01);
  EXPECT_NEAR(w[0], 0.99, 1e-6);
  EXPECT_NEAR(w[1], 1.01, 1e-6);
  EXPECT_FLOAT_EQ(w[2], 1.0f);
  EXPECT_NEAR(w[3], 0.99, 1e-6);
}

TEST(AdamW, ZeroGradientOnlyDecaysTheWeight) {
  // Decoupled decay ignores the moments: w *= (1 - lr*wd). Adam's L2 form instead feeds wd*w
  // through the moments, giving a step of about lr.
  std::vector<float> w = {2.0f, -4.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> zero = {0.0f, 0.0f};
  AdamRule{0.9, 0.999, 1e-8, 0.5, true}.update(w, zero, m, v, 1, 0.1);
  EXPECT_FLOAT_EQ(w[0], 2.0f * 0.95f);
  EXPECT_FLOAT_EQ(w[1], -4.0f * 0.95f);

  std::vector<float> w2 = {2.0f, -4.0f}, m2(2, 0.0f), v2(2, 0.0f);
  AdamRule{0.9, 0.999, 1e-8, 0.5, false}.update(w2, zero, m2, v2, 1, 0.1);
  EXPECT_NEAR(w2[0], 1.9, 1e-6);
  EXPECT_NEAR(w2[1], -3.9, 1e-6);
}

TEST(Adam, BiasCorrectionUsesTheGivenStep) {
  // Lazy Adam: a row first updated at global step 100 passes its own step 1 and gets lr*sign(g).
  const AdamRule rule;
  std::vector<float> w = {0.0f}, m = {0.0f}, v = {0.0f};
  rule.update(w, std::vector<float>{3.0f}, m, v, 1, 0.5);
  EXPECT_NEAR(w[0], -0.5, 1e-6);
  std::vector<float> w_late = {0.0f}, m_late = {0.0f}, v_late = {0.0f};
  rule.update(w_late, std::vector<float>{3.0f}, m_late, v_late, 10000, 0.5);
  EXPECT_GT(std::fabs(w_late[0] + 0.5f), 0.1f);  // a global step would mis-correct fresh moments
}

}  // namespace
}  // namespace aiacc::optim
