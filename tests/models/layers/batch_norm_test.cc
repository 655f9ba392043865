// BatchNorm layer: parameters and buffers as PyTorch names them, running statistics, eval
// mode, finite-difference gradients through the layer in float64, and the Layer contract
// (grad_ready once per parameter, gradients overwritten on a second backward).
#include "models/layers/batch_norm.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <span>
#include <thread>
#include <map>
#include <vector>

#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

Tensor f64_tensor(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector<double>(values, shape);
}

TEST(BatchNormLayer, ParametersAndBuffersFollowPyTorchNames) {
  BatchNorm bn("bn1", 3);
  const auto params = bn.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name(), "bn1.weight");
  EXPECT_EQ(params[1]->name(), "bn1.bias");
  EXPECT_FALSE(params[0]->decays());
  EXPECT_FALSE(params[1]->decays());
  EXPECT_EQ(params[0]->value().to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(params[1]->value().to_vector<float>(), std::vector<float>(3, 0.0f));
  const auto buffers = bn.buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "bn1.running_mean");
  EXPECT_EQ(buffers[1].first, "bn1.running_var");
  EXPECT_EQ(buffers[2].first, "bn1.num_batches_tracked");
  EXPECT_EQ(buffers[1].second.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(buffers[2].second.dtype(), DType::i64);
}

TEST(BatchNormLayer, TrainingUpdatesRunningStatsAndEvalUsesThem) {
  BatchNorm bn("bn", 2, 0.1, 1e-5, DType::f64);
  // [N=2, C=2, H=1, W=2]: channel 0 holds {1, 2, 5, 6}, channel 1 holds {0, 0, 4, 4}.
  const Tensor x = f64_tensor({1, 2, 0, 0, 5, 6, 4, 4}, {2, 2, 1, 2});
  const Tensor y = bn.forward(x, true);
  EXPECT_EQ(bn.num_batches_tracked(), 1);
  const auto rm = bn.running_mean().to_vector<double>();
  const auto rv = bn.running_var().to_vector<double>();
  EXPECT_DOUBLE_EQ(rm[0], 0.1 * 3.5);
  EXPECT_DOUBLE_EQ(rm[1], 0.1 * 2.0);
  EXPECT_DOUBLE_EQ(rv[0], 0.9 + 0.1 * (17.0 / 3.0));  // sum of squares 17 over M - 1 = 3
  EXPECT_DOUBLE_EQ(rv[1], 0.9 + 0.1 * (16.0 / 3.0));
  // Training output is normalised per channel: mean 0, biased variance ~1.
  const auto yv = y.to_vector<double>();
  EXPECT_NEAR(yv[0] + yv[1] + yv[4] + yv[5], 0.0, 1e-12);
  EXPECT_NEAR(yv[2] * yv[2] + yv[3] * yv[3] + yv[6] * yv[6] + yv[7] * yv[7], 4.0, 1e-4);
  // Eval: uses the running statistics, leaves them and the counter alone.
  const Tensor e = bn.forward(x, false);
  EXPECT_NEAR(e.to_vector<double>()[0], (1 - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-12);
  EXPECT_EQ(bn.running_mean().to_vector<double>(), rm);
  EXPECT_EQ(bn.num_batches_tracked(), 1);
}

// Loss L = sum(w * bn(x)) through the layer; analytic gradients come from backward(w).
void check_layer_gradients(const Shape& shape, bool training) {
  const std::int64_t channels = shape[1];
  BatchNorm bn("bn", channels, 0.1, 1e-5, DType::f64);
  auto gamma = random_values(channels, 1, 0.5, 1.5), beta = random_values(channels, 2);
  bn.weight().value().copy_from(f64_tensor(gamma, {channels}));
  bn.bias().value().copy_from(f64_tensor(beta, {channels}));
  Tensor x = f64_tensor(random_values(shape.numel(), 3, -2.0, 2.0), shape);
  const Tensor w = f64_tensor(random_values(shape.numel(), 4), shape);
  if (!training) bn.forward(f64_tensor(random_values(shape.numel(), 5, 0.0, 3.0), shape), true);
  auto loss = [&] {
    // Running statistics must not drift while probing: restore them around the forward.
    const Tensor rm = bn.running_mean().clone(), rv = bn.running_var().clone();
    const Tensor y = bn.forward(x, training);
    bn.buffers()[0].second.copy_from(rm);
    bn.buffers()[1].second.copy_from(rv);
    double total = 0;
    for (std::int64_t i = 0; i < y.numel(); ++i) total += w.data<double>()[i] * y.data<double>()[i];
    return total;
  };
  auto x_span = x.span<double>();
  const auto num_dx = numeric_gradient(loss, x_span);
  const auto num_dgamma = numeric_gradient(loss, bn.weight().value().span<double>());
  const auto num_dbeta = numeric_gradient(loss, bn.bias().value().span<double>());
  loss();
  const Tensor dx = bn.backward(w);
  EXPECT_TRUE(gradients_close(dx.to_vector<double>(), num_dx));
  EXPECT_TRUE(gradients_close(bn.weight().grad().to_vector<double>(), num_dgamma));
  EXPECT_TRUE(gradients_close(bn.bias().grad().to_vector<double>(), num_dbeta));
}

TEST(BatchNormLayer, GradientsMatchFiniteDifferences) {
  check_layer_gradients({4, 3}, true);
  check_layer_gradients({2, 3, 2, 3}, true);
  check_layer_gradients({1, 2, 3, 1}, true);  // batch 1: statistics over H*W
  check_layer_gradients({3, 2, 2, 2}, false);
}

TEST(BatchNormLayer, GradReadyOncePerParameterAndGradsOverwritten) {
  BatchNorm bn("bn", 4);
  std::map<std::string, int> fired;
  for (Parameter* p : bn.parameters()) {
    p->add_grad_ready_hook([&fired](Parameter& param) { ++fired[param.name()]; });
  }
  const Tensor x = Tensor::from_vector<float>(aiacc::testing::random_floats(40, 6), {5, 4, 2});
  const Tensor dy = Tensor::from_vector<float>(aiacc::testing::random_floats(40, 7), {5, 4, 2});
  bn.forward(x, true);
  const Tensor dx1 = bn.backward(dy);
  EXPECT_EQ(fired, (std::map<std::string, int>{{"bn.weight", 1}, {"bn.bias", 1}}));
  const auto dgamma1 = bn.weight().grad().to_vector<float>();
  const auto dbeta1 = bn.bias().grad().to_vector<float>();
  bn.forward(x, true);
  const Tensor dx2 = bn.backward(dy, /*need_input_grad=*/false);
  EXPECT_FALSE(dx2.defined());
  EXPECT_EQ(bn.weight().grad().to_vector<float>(), dgamma1);  // overwritten, not doubled
  EXPECT_EQ(bn.bias().grad().to_vector<float>(), dbeta1);
  EXPECT_EQ(fired, (std::map<std::string, int>{{"bn.weight", 2}, {"bn.bias", 2}}));
}

TEST(BatchNormLayer, RejectsMismatchedInput) {
  BatchNorm bn("bn7", 3);
  EXPECT_THROW(bn.forward(Tensor::zeros({2, 4}), true), InternalError);
  EXPECT_THROW(bn.forward(Tensor::zeros({2, 3}, DType::f64), true), InternalError);
  EXPECT_THROW(bn.forward(Tensor::zeros({1, 3}), true), InternalError);  // one value per channel
  EXPECT_THROW(bn.backward(Tensor::zeros({2, 3})), InternalError);       // no forward yet
  try {
    bn.forward(Tensor::zeros({2, 4}), true);
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("bn7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace aiacc::models

// Synchronised batch norm: two replicas (threads) with half the batch each, summing through a
// shared in-process "all-reduce", normalise, differentiate and update running statistics like
// one layer over the whole batch. Each replica's loss is the mean over its own half, so its
// dx is twice the full-batch dx rows, and the average of the replicas' weight/bias gradients
// equals the full batch's.
namespace aiacc::models {
namespace {

TEST(BatchNormLayer, SynchronisedReplicasMatchOneLayerOverTheWholeBatch) {
  const std::int64_t n = 8, c = 3, h = 2, w = 3, half = n / 2, plane = c * h * w;
  const auto x_values = random_values(static_cast<std::size_t>(n * plane), 11);
  const auto dy_values = random_values(static_cast<std::size_t>(n * plane), 12);
  Tensor x = f64_tensor(x_values, Shape{n, c, h, w});
  // Full-batch loss = mean over n examples; replica loss = mean over its half: dy doubles.
  Tensor dy = f64_tensor(dy_values, Shape{n, c, h, w});
  BatchNorm full("bn", c, 0.1, 1e-5, DType::f64);
  const Tensor y_full = full.forward(x, true);
  const Tensor dx_full = full.backward(dy);
  const auto gamma_grad_full = full.weight().grad().to_vector<double>();
  const auto beta_grad_full = full.bias().grad().to_vector<double>();

  std::vector<std::vector<double>> slots(2);
  std::barrier sync(2);
  auto sum_over_replicas = [&](int replica, std::span<double> values) {
    slots[static_cast<std::size_t>(replica)].assign(values.begin(), values.end());
    sync.arrive_and_wait();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = slots[0][i] + slots[1][i];
    sync.arrive_and_wait();
  };
  std::vector<std::vector<double>> y(2), dx(2), gamma_grad(2), beta_grad(2), running_var(2);
  auto replica = [&](int r) {
    BatchNorm bn("bn", c, 0.1, 1e-5, DType::f64);
    bn.set_cross_replica_sum([&, r](std::span<double> v) { sum_over_replicas(r, v); });
    const auto begin = static_cast<std::ptrdiff_t>(r * half * plane);
    const auto end = begin + static_cast<std::ptrdiff_t>(half * plane);
    Tensor xr = f64_tensor({x_values.begin() + begin, x_values.begin() + end}, Shape{half, c, h, w});
    std::vector<double> dyr(dy_values.begin() + begin, dy_values.begin() + end);
    for (double& v : dyr) v *= 2;
    y[static_cast<std::size_t>(r)] = bn.forward(xr, true).to_vector<double>();
    dx[static_cast<std::size_t>(r)] = bn.backward(f64_tensor(dyr, Shape{half, c, h, w})).to_vector<double>();
    gamma_grad[static_cast<std::size_t>(r)] = bn.weight().grad().to_vector<double>();
    beta_grad[static_cast<std::size_t>(r)] = bn.bias().grad().to_vector<double>();
    running_var[static_cast<std::size_t>(r)] = bn.running_var().to_vector<double>();
  };
  std::thread other(replica, 1);
  replica(0);
  other.join();

  const auto y_ref = y_full.to_vector<double>();
  const auto dx_ref = dx_full.to_vector<double>();
  for (int r = 0; r < 2; ++r) {
    for (std::int64_t i = 0; i < half * plane; ++i) {
      const auto at = static_cast<std::size_t>(r * half * plane + i);
      EXPECT_NEAR(y[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], y_ref[at], 1e-12);
      EXPECT_NEAR(dx[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], 2 * dx_ref[at], 1e-12);
    }
    EXPECT_EQ(running_var[static_cast<std::size_t>(r)].size(), static_cast<std::size_t>(c));
    for (std::int64_t k = 0; k < c; ++k) {
      EXPECT_NEAR(running_var[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)],
                  full.running_var().to_vector<double>()[static_cast<std::size_t>(k)], 1e-12);
    }
  }
  for (std::int64_t k = 0; k < c; ++k) {
    const auto i = static_cast<std::size_t>(k);
    EXPECT_NEAR((gamma_grad[0][i] + gamma_grad[1][i]) / 2, gamma_grad_full[i], 1e-12);
    EXPECT_NEAR((beta_grad[0][i] + beta_grad[1][i]) / 2, beta_grad_full[i], 1e-12);
  }
}

}  // namespace
}  // namespace aiacc::models
