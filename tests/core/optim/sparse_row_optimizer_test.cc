// SparseRowOptimizer: row state layouts, agreement with the dense Optimizer when a row is
// touched every step, lazy Adam's per-row step count, and the rules it refuses.
#include "core/optim/sparse_row_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/optim/optimizer.h"
#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using ::testing::HasSubstr;
using testing::random_vector;

OptimizerOptions options_for(const std::string& type) {
  OptimizerOptions o;
  o.type = type;
  o.weight_decay = type == "ftrl" ? 0.0 : 0.05;
  o.momentum = 0.9;
  o.eps = 1e-4;
  o.initial_accumulator = 0.25;
  o.l1 = 0.01;
  o.l2 = 0.2;
  return o;
}

TEST(SparseRowOptimizer, StateLayoutPerType) {
  OptimizerOptions plain = options_for("sgd");
  plain.momentum = 0.0;
  EXPECT_EQ(SparseRowOptimizer(plain).state_floats(16), 0);
  EXPECT_EQ(SparseRowOptimizer(options_for("sgd")).state_floats(16), 17);
  EXPECT_EQ(SparseRowOptimizer(options_for("adagrad")).state_floats(16), 16);
  EXPECT_EQ(SparseRowOptimizer(options_for("adam")).state_floats(16), 33);
  EXPECT_EQ(SparseRowOptimizer(options_for("adamw")).state_floats(16), 33);
  EXPECT_EQ(SparseRowOptimizer(options_for("ftrl")).state_floats(16), 32);

  std::vector<float> state(5, -1.0f);
  SparseRowOptimizer(options_for("adagrad")).init_state(state.data(), 5);
  EXPECT_EQ(state, std::vector<float>(5, 0.25f));
  std::vector<float> adam_state(7, -1.0f);
  SparseRowOptimizer(options_for("adam")).init_state(adam_state.data(), 3);
  EXPECT_EQ(adam_state, std::vector<float>(7, 0.0f));
}

class SparseMatchesDense : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseMatchesDense, RowTouchedEveryStepEqualsDenseParameter) {
  const OptimizerOptions o = options_for(GetParam());
  const int dim = 8;
  const std::vector<float> initial = random_vector(dim, 1);
  Parameter dense("row", Tensor::from_vector(initial, Shape{dim}));
  Optimizer optimizer(o, {&dense});

  const SparseRowOptimizer sparse(o);
  // A server arena row: [value | state].
  std::vector<float> row(static_cast<std::size_t>(dim + sparse.state_floats(dim)));
  std::copy(initial.begin(), initial.end(), row.begin());
  sparse.init_state(row.data() + dim, dim);
  for (int t = 1; t <= 8; ++t) {
    const std::vector<float> g = random_vector(dim, 70 + t);
    std::copy(g.begin(), g.end(), dense.grad().data<float>());
    const double lr = 0.1 / t;
    optimizer.step(lr);
    sparse.update_row(row.data(), row.data() + dim, g.data(), dim, lr);
  }
  EXPECT_EQ(std::vector<float>(row.begin(), row.begin() + dim), dense.value().to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Types, SparseMatchesDense,
                         ::testing::Values("sgd", "adagrad", "adam", "adamw", "ftrl"));

TEST(SparseRowOptimizer, LazyAdamCorrectsBiasByRowStep) {
  OptimizerOptions o = options_for("adam");
  o.weight_decay = 0.0;
  o.eps = 1e-8;
  const SparseRowOptimizer sparse(o);
  const int dim = 4;
  const int stride = dim + sparse.state_floats(dim);
  std::vector<float> arena(static_cast<std::size_t>(2 * stride), 0.0f);  // rows A and B
  float* a = arena.data();
  float* b = arena.data() + stride;
  sparse.init_state(a + dim, dim);
  sparse.init_state(b + dim, dim);
  const std::vector<float> g = {0.5f, -0.01f, 3.0f, 0.0f};
  for (int t = 0; t < 5; ++t) sparse.update_row(a, a + dim, g.data(), dim, 0.1);
  EXPECT_EQ(a[dim + 2 * dim], 5.0f);  // row A's step count
  // Row B is first touched now: its own step is 1, so each moved coordinate moves by lr.
  sparse.update_row(b, b + dim, g.data(), dim, 0.1);
  EXPECT_EQ(b[dim + 2 * dim], 1.0f);
  EXPECT_NEAR(b[0], -0.1f, 1e-6);
  EXPECT_NEAR(b[1], 0.1f, 1e-5);
  EXPECT_NEAR(b[2], -0.1f, 1e-6);
  EXPECT_EQ(b[3], 0.0f);
}

TEST(SparseRowOptimizer, RowStepSaturatesWithoutHarm) {
  const SparseRowOptimizer sparse(options_for("adam"));
  std::vector<float> value = {1.0f}, state = {0.0f, 0.0f, 16777216.0f};
  const float g = 0.5f;
  sparse.update_row(value.data(), state.data(), &g, 1, 0.1);
  EXPECT_EQ(state[2], 16777216.0f);
  EXPECT_TRUE(std::isfinite(value[0]));
  EXPECT_LT(value[0], 1.0f);
}

TEST(SparseRowOptimizer, RejectsLayerWiseRules) {
  for (const char* type : {"lars", "lamb"}) {
    try {
      SparseRowOptimizer sparse(options_for(type));
      ADD_FAILURE() << type << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("optimizer.type"));
      EXPECT_THAT(e.what(), HasSubstr(type));
    }
  }
}

}  // namespace
}  // namespace aiacc::optim
