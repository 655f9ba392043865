// AdagradRule against a float64 transcription of torch.optim.Adagrad (no lr_decay).
#include "core/optim/adagrad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using testing::expect_close;
using testing::random_vector;
using testing::to_double;

TEST(Adagrad, MatchesFloat64ReferenceOverSteps) {
  const double eps = 1e-3, wd = 0.05, initial = 0.1;
  const AdagradRule rule{eps, wd, initial};
  const std::size_t n = 40;
  std::vector<float> w = random_vector(n, 5, 2.0), sum(n, static_cast<float>(initial));
  std::vector<double> w_ref = to_double(w), sum_ref(n, initial);
  for (int t = 1; t <= 15; ++t) {
    const std::vector<float> g = random_vector(n, 300 + t, 0.5);
    rule.update(w, g, sum, 0.1);
    for (std::size_t i = 0; i < n; ++i) {
      const double grad = g[i] + wd * w_ref[i];
      sum_ref[i] += grad * grad;
      w_ref[i] -= 0.1 * grad / (std::sqrt(sum_ref[i]) + eps);
    }
  }
  expect_close(w, w_ref, 1e-5, "adagrad weights");
  expect_close(sum, sum_ref, 1e-5, "adagrad sum");
}

TEST(Adagrad, InitialAccumulatorDampsTheFirstStep) {
  // sum = 3 + 1^2 = 4: the first step is lr * 1 / (2 + eps).
  const AdagradRule rule{1e-10, 0.0, 3.0};
  std::vector<float> w = {0.0f}, sum = {3.0f};
  rule.update(w, std::vector<float>{1.0f}, sum, 1.0);
  EXPECT_FLOAT_EQ(sum[0], 4.0f);
  EXPECT_FLOAT_EQ(w[0], -0.5f);
}

}  // namespace
}  // namespace aiacc::optim
