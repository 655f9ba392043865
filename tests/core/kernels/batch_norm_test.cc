// Batch-norm kernels against a naive double-precision reference, PyTorch's running-statistic
// formula computed by hand, and finite-difference gradients in float64.
#include "core/kernels/batch_norm.h"

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

struct Reference {
  std::vector<double> y, mean, var;  // var is biased
};

// Plain loops over an [N, C, S] tensor, statistics per channel, all in double.
Reference reference_train(const BatchNormGeometry& g, const std::vector<double>& x,
                          const std::vector<double>& gamma, const std::vector<double>& beta,
                          double eps) {
  const std::int64_t m = g.batch * g.spatial;
  Reference r{std::vector<double>(x.size()), std::vector<double>(g.channels, 0.0),
              std::vector<double>(g.channels, 0.0)};
  auto at = [&](std::int64_t n, std::int64_t c, std::int64_t s) {
    return (n * g.channels + c) * g.spatial + s;
  };
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t s = 0; s < g.spatial; ++s) r.mean[c] += x[at(n, c, s)] / m;
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t s = 0; s < g.spatial; ++s)
        r.var[c] += (x[at(n, c, s)] - r.mean[c]) * (x[at(n, c, s)] - r.mean[c]) / m;
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t s = 0; s < g.spatial; ++s)
        r.y[at(n, c, s)] =
            gamma[c] * (x[at(n, c, s)] - r.mean[c]) / std::sqrt(r.var[c] + eps) + beta[c];
  }
  return r;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

template <class T>
void check_forward_train(const BatchNormGeometry& g, double tolerance) {
  const std::int64_t count = g.batch * g.channels * g.spatial;
  const auto x = random_values(count, 1, -3.0, 5.0);
  const auto gamma = random_values(g.channels, 2, 0.5, 1.5);
  const auto beta = random_values(g.channels, 3);
  const BatchNormOptions options;
  const Reference ref = reference_train(g, x, gamma, beta, options.eps);

  auto xt = cast<T>(x), gt = cast<T>(gamma), bt = cast<T>(beta);
  std::vector<T> y(count), mean(g.channels), inv_std(g.channels);
  std::vector<T> running_mean(g.channels, T(0)), running_var(g.channels, T(1));
  batch_norm_forward_train<T>(g, options, xt.data(), gt.data(), bt.data(), y.data(), mean.data(),
                              inv_std.data(), running_mean.data(), running_var.data());
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_NEAR(y[i], ref.y[i], tolerance) << "element " << i;
  const double m = static_cast<double>(g.batch * g.spatial);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    EXPECT_NEAR(mean[c], ref.mean[c], tolerance);
    EXPECT_NEAR(inv_std[c], 1.0 / std::sqrt(ref.var[c] + options.eps), tolerance * 10);
    // PyTorch: running = 0.9 * running + 0.1 * stat, with the unbiased variance.
    EXPECT_NEAR(running_mean[c], 0.1 * ref.mean[c], tolerance);
    EXPECT_NEAR(running_var[c], 0.9 + 0.1 * ref.var[c] * m / (m - 1), tolerance);
  }
}

TEST(BatchNormKernel, TrainForwardMatchesReference) {
  for (const BatchNormGeometry& g :
       {BatchNormGeometry{1, 3, 35}, BatchNormGeometry{7, 5, 1}, BatchNormGeometry{2, 1, 1},
        BatchNormGeometry{3, 6, 9}, BatchNormGeometry{64, 37, 1}, BatchNormGeometry{8, 16, 49}}) {
    SCOPED_TRACE(::testing::Message()
                 << "N=" << g.batch << " C=" << g.channels << " S=" << g.spatial);
    check_forward_train<double>(g, 1e-12);
    check_forward_train<float>(g, 2e-5);
  }
}

TEST(BatchNormKernel, RunningStatisticsFollowPyTorchFormula) {
  // x for one channel over N = 4: mean 2.5, biased var 1.25, unbiased var 5/3.
  const BatchNormGeometry g{4, 1, 1};
  const std::vector<double> x = {1, 2, 3, 4};
  const double gamma = 1, beta = 0;
  std::vector<double> y(4);
  double mean = 0, inv_std = 0, running_mean = 0.5, running_var = 2.0;
  BatchNormOptions options;
  options.momentum = 0.3;
  batch_norm_forward_train<double>(g, options, x.data(), &gamma, &beta, y.data(), &mean, &inv_std,
                                   &running_mean, &running_var);
  EXPECT_DOUBLE_EQ(running_mean, 0.7 * 0.5 + 0.3 * 2.5);
  EXPECT_DOUBLE_EQ(running_var, 0.7 * 2.0 + 0.3 * (5.0 / 3.0));
  EXPECT_DOUBLE_EQ(inv_std, 1.0 / std::sqrt(1.25 + 1e-5));
  // A second step compounds: running = 0.7 * running + 0.3 * stat.
  const double after_one = running_mean;
  batch_norm_forward_train<double>(g, options, x.data(), &gamma, &beta, y.data(), &mean, &inv_std,
                                   &running_mean, &running_var);
  EXPECT_DOUBLE_EQ(running_mean, 0.7 * after_one + 0.3 * 2.5);
}

TEST(BatchNormKernel, EvalUsesRunningStatistics) {
  const BatchNormGeometry g{3, 4, 5};
  const auto x = random_values(60, 4);
  const auto gamma = random_values(4, 5), beta = random_values(4, 6);
  const auto running_mean = random_values(4, 7), running_var = random_values(4, 8, 0.5, 2.0);
  std::vector<double> y(60);
  batch_norm_forward_eval<double>(g, {}, x.data(), gamma.data(), beta.data(), running_mean.data(),
                                  running_var.data(), y.data());
  for (std::int64_t i = 0; i < 60; ++i) {
    const std::int64_t c = (i / 5) % 4;
    const double expected =
        gamma[c] * (x[i] - running_mean[c]) / std::sqrt(running_var[c] + 1e-5) + beta[c];
    ASSERT_NEAR(y[i], expected, 1e-12);
  }
}

TEST(BatchNormKernel, TrainingNeedsMoreThanOneValuePerChannel) {
  const BatchNormGeometry g{1, 2, 1};
  std::vector<double> x(2), y(2), p(2, 1.0), mean(2), inv_std(2);
  EXPECT_THROW(batch_norm_forward_train<double>(g, {}, x.data(), p.data(), p.data(), y.data(),
                                                mean.data(), inv_std.data(), nullptr, nullptr),
               InternalError);
}

// L = sum(w * y(x, gamma, beta)) with a random w: its gradients are exactly backward(dy = w).
void check_gradients(const BatchNormGeometry& g, BatchNormStats stats) {
  const std::int64_t count = g.batch * g.channels * g.spatial;
  auto x = random_values(count, 11, -2.0, 2.0);
  auto gamma = random_values(g.channels, 12, 0.5, 1.5);
  auto beta = random_values(g.channels, 13);
  const auto w = random_values(count, 14);
  const auto running_mean = random_values(g.channels, 15);
  const auto running_var = random_values(g.channels, 16, 0.5, 2.0);
  std::vector<double> y(count), mean(g.channels), inv_std(g.channels);
  auto forward = [&] {
    if (stats == BatchNormStats::batch) {
      batch_norm_forward_train<double>(g, {}, x.data(), gamma.data(), beta.data(), y.data(),
                                       mean.data(), inv_std.data(), nullptr, nullptr);
    } else {
      batch_norm_forward_eval<double>(g, {}, x.data(), gamma.data(), beta.data(),
                                      running_mean.data(), running_var.data(), y.data());
      for (std::int64_t c = 0; c < g.channels; ++c) {
        mean[c] = running_mean[c];
        inv_std[c] = 1.0 / std::sqrt(running_var[c] + 1e-5);
      }
    }
  };
  auto loss = [&] {
    forward();
    double total = 0;
    for (std::int64_t i = 0; i < count; ++i) total += w[i] * y[i];
    return total;
  };
  forward();
  std::vector<double> dx(count), dgamma(g.channels), dbeta(g.channels);
  batch_norm_backward<double>(g, stats, x.data(), w.data(), gamma.data(), mean.data(),
                              inv_std.data(), dx.data(), dgamma.data(), dbeta.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x), 1e-5, 1e-7));
  EXPECT_TRUE(gradients_close(dgamma, numeric_gradient(loss, gamma), 1e-5, 1e-7));
  EXPECT_TRUE(gradients_close(dbeta, numeric_gradient(loss, beta), 1e-5, 1e-7));
}

TEST(BatchNormKernel, TrainBackwardMatchesFiniteDifferences) {
  check_gradients({5, 3, 1}, BatchNormStats::batch);
  check_gradients({2, 3, 7}, BatchNormStats::batch);
  check_gradients({1, 2, 9}, BatchNormStats::batch);
}

TEST(BatchNormKernel, EvalBackwardMatchesFiniteDifferences) {
  check_gradients({3, 4, 5}, BatchNormStats::running);
}

TEST(BatchNormKernel, LargeInputMultiThreadedMatchesReference) {
  // Large enough to take the OpenMP path; float accumulates in double so stays accurate.
  check_forward_train<float>({32, 24, 64}, 5e-5);
}

}  // namespace
}  // namespace aiacc::kernels
