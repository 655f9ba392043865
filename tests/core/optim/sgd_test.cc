// SgdRule against a float64 transcription of torch.optim.SGD's documented algorithm, and the
// closed form of plain SGD on a quadratic.
#include "core/optim/sgd.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;
using testing::to_double;

// torch.optim.SGD pseudo-code, in double: g += wd*w; b = g (t=1) or mu*b + (1-tau)*g;
// g = g + mu*b (nesterov) or b; w -= lr*g.
void reference_sgd(std::vector<double>& w, const std::vector<double>& g, std::vector<double>& b,
                   double mu, double tau, bool nesterov, double wd, int t, double lr) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    double d = g[i] + wd * w[i];
    if (mu != 0.0) {
      b[i] = t == 1 ? d : mu * b[i] + (1.0 - tau) * d;
      d = nesterov ? d + mu * b[i] : b[i];
    }
    w[i] -= lr * d;
  }
}

struct SgdCase {
  const char* name;
  double momentum, dampening;
  bool nesterov;
  double weight_decay;
};

class SgdReference : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdReference, MatchesFloat64OverSteps) {
  const SgdCase c = GetParam();
  const SgdRule rule{c.momentum, c.dampening, c.nesterov, c.weight_decay};
  const std::size_t n = 64;
  std::vector<float> w = random_vector(n, 1, 2.0);
  std::vector<float> buf(n, 0.0f);
  std::vector<double> w_ref = to_double(w), buf_ref(n, 0.0);
  for (int t = 1; t <= 15; ++t) {
    const std::vector<float> g = random_vector(n, 100 + t);
    const double lr = 0.05 + 0.01 * t;  // a changing rate, as under a schedule
    rule.update(w, g, rule.state_per_element() ? std::span<float>(buf) : std::span<float>(), t, lr);
    reference_sgd(w_ref, to_double(g), buf_ref, c.momentum, c.dampening, c.nesterov, c.weight_decay,
                  t, lr);
  }
  expect_close(w, w_ref, 1e-5, c.name);
  // The buffer sums O(1) gradients, so its rounding error scales with them, not with its value.
  if (c.momentum > 0.0) expect_close(buf, buf_ref, 1e-5, "momentum buffer", 1.0);
}

INSTANTIATE_TEST_SUITE_P(Variants, SgdReference,
                         ::testing::Values(SgdCase{"plain", 0.0, 0.0, false, 0.0},
                                           SgdCase{"weight_decay", 0.0, 0.0, false, 0.1},
                                           SgdCase{"momentum", 0.9, 0.0, false, 0.0},
                                           SgdCase{"dampening", 0.8, 0.5, false, 0.05},
                                           SgdCase{"nesterov", 0.9, 0.0, true, 0.01}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Sgd, PlainStepsOnQuadraticFollowClosedForm) {
  // f(w) = a/2 * w^2 per element, g = a*w, so w_k = w_0 * (1 - lr*a)^k.
  const SgdRule rule;
  const std::vector<double> a = {0.5, 1.0, 2.0, 3.0};
  std::vector<float> w = {1.0f, -2.0f, 0.5f, 4.0f};
  const std::vector<float> w0 = w;
  const double lr = 0.1;
  for (int k = 1; k <= 10; ++k) {
    std::vector<float> g(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) g[i] = static_cast<float>(a[i] * w[i]);
    rule.update(w, g, {}, k, lr);
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(w[i], w0[i] * std::pow(1.0 - lr * a[i], 10), 1e-6) << i;
  }
}

TEST(Sgd, FirstStepSetsBufferToGradientDespiteDampening) {
  const SgdRule rule{0.9, 0.5, false, 0.0};
  std::vector<float> w = {1.0f, 1.0f}, buf = {7.0f, 7.0f};  // stale contents must be ignored
  const std::vector<float> g = {0.2f, -0.4f};
  rule.update(w, g, buf, 1, 1.0);
  EXPECT_FLOAT_EQ(buf[0], 0.2f);
  EXPECT_FLOAT_EQ(buf[1], -0.4f);
  EXPECT_FLOAT_EQ(w[0], 0.8f);
  EXPECT_FLOAT_EQ(w[1], 1.4f);
  rule.update(w, g, buf, 2, 1.0);  // now dampened: 0.9*0.2 + 0.5*0.2
  EXPECT_FLOAT_EQ(buf[0], 0.28f);
}

TEST(Sgd, DeclaresStateOnlyWithMomentum) {
  EXPECT_EQ(SgdRule{}.state_per_element(), 0);
  EXPECT_EQ((SgdRule{0.9, 0.0, false, 0.0}).state_per_element(), 1);
}

}  // namespace
}  // namespace aiacc::optim
