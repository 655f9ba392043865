// FtrlRule against a float64 transcription of McMahan et al. (2013), Algorithm 1, and the
// L1 sparsity property.
#include "core/optim/ftrl.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;

struct FtrlReference {
  double alpha, beta, l1, l2;
  std::vector<double> z, n, w;
  void step(const std::vector<float>& g) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double sigma = (std::sqrt(n[i] + g[i] * double(g[i])) - std::sqrt(n[i])) / alpha;
      z[i] += g[i] - sigma * w[i];
      n[i] += double(g[i]) * g[i];
      w[i] = std::fabs(z[i]) <= l1
                 ? 0.0
                 : -(z[i] - (z[i] > 0 ? 1.0 : -1.0) * l1) / ((beta + std::sqrt(n[i])) / alpha + l2);
    }
  }
};

TEST(Ftrl, MatchesFloat64ReferenceOverSteps) {
  const FtrlRule rule{0.5, 0.05, 0.3};
  const std::size_t count = 64;
  std::vector<float> w(count, 0.0f), z(count, 0.0f), n(count, 0.0f);
  FtrlReference ref{0.2,
                    0.5,
                    0.05,
                    0.3,
                    std::vector<double>(count),
                    std::vector<double>(count),
                    std::vector<double>(count)};
  for (int t = 1; t <= 20; ++t) {
    const std::vector<float> g = random_vector(count, 400 + t, 1.0);
    rule.update(w, g, z, n, 0.2);
    ref.step(g);
  }
  expect_close(w, ref.w, 1e-4, "ftrl weights");
  expect_close(z, ref.z, 1e-5, "ftrl z");
  expect_close(n, ref.n, 1e-5, "ftrl n");
  int nonzero = 0;
  for (float v : w) nonzero += v != 0.0f;
  EXPECT_GT(nonzero, 0);  // the test would be vacuous if l1 zeroed everything
}

TEST(Ftrl, WeightsStayZeroWhileZWithinL1) {
  const FtrlRule rule{1.0, 1.0, 0.0};
  std::vector<float> w = {0.0f}, z = {0.0f}, n = {0.0f};
  // Gradients of 0.3 with w = 0 add 0.3 to z each step: |z| = 0.3, 0.6, 0.9 stay within l1 = 1.
  for (int t = 0; t < 3; ++t) {
    rule.update(w, std::vector<float>{0.3f}, z, n, 0.1);
    EXPECT_EQ(w[0], 0.0f) << "step " << t;
  }
  EXPECT_NEAR(z[0], 0.9f, 1e-6);
  rule.update(w, std::vector<float>{0.3f}, z, n, 0.1);  // |z| = 1.2 > l1
  // w = -(1.2 - 1) / ((1 + sqrt(0.36)) / 0.1) = -0.2 / 16 = -0.0125
  EXPECT_NEAR(w[0], -0.0125f, 1e-6);
}

// A learning rate of 0 (the default warm-up's first step, a decay to min_lr 0) leaves weights
// and state alone; it made them NaN (sigma = g^2 / 0).
TEST(Ftrl, ARateOfZeroIsNoStep) {
  const FtrlRule rule{1.0, 0.0, 0.0};
  std::vector<float> w = {0.0f, 0.25f}, z = {0.0f, -0.5f}, n = {0.0f, 4.0f};
  rule.update(w, std::vector<float>{0.3f, -0.2f}, z, n, 0.0);
  EXPECT_EQ(w, (std::vector<float>{0.0f, 0.25f}));
  EXPECT_EQ(z, (std::vector<float>{0.0f, -0.5f}));
  EXPECT_EQ(n, (std::vector<float>{0.0f, 4.0f}));
  rule.update(w, std::vector<float>{0.3f, -0.2f}, z, n, 0.1);  // then steps as usual
  for (float v : w) EXPECT_TRUE(std::isfinite(v));
}

TEST(Ftrl, WeightFollowsClosedFormFromState) {
  const FtrlRule rule{2.0, 0.5, 0.25};
  // -(z - sign(z) l1) / ((beta + sqrt(n))/alpha + l2) with z = -3, n = 4, alpha = 0.5:
  // -(-3 + 0.5) / ((2 + 2)/0.5 + 0.25) = 2.5 / 8.25
  EXPECT_NEAR(rule.weight(-3.0f, 4.0f, 0.5), 2.5 / 8.25, 1e-7);
  EXPECT_EQ(rule.weight(0.5f, 4.0f, 0.5), 0.0f);
  EXPECT_EQ(rule.weight(-0.5f, 4.0f, 0.5), 0.0f);
}

}  // namespace
}  // namespace aiacc::optim
