// Dropout layer: identity in eval mode, reproducible masks across instances with the same seed,
// a fresh mask per step, and backward applying the forward's mask.
#include "models/layers/dropout.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace aiacc::models {
namespace {

TEST(DropoutLayer, EvalAndZeroProbabilityAreIdentity) {
  Dropout dropout("drop", 0.5, 1);
  const Tensor x = Tensor::full({4, 8}, 2.0);
  const Tensor y = dropout.forward(x, false);
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(dropout.backward(x).to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(dropout.step(), 0u);  // eval does not consume a step
  Dropout never("never", 0.0, 1);
  EXPECT_EQ(never.forward(x, true).to_vector<float>(), x.to_vector<float>());
}

TEST(DropoutLayer, MasksAreReproducibleAndBackwardUsesThem) {
  Dropout a("a", 0.25, 42), b("b", 0.25, 42);
  const Tensor x = Tensor::full({16, 33}, 1.0, DType::f64);
  const auto y0 = a.forward(x, true).to_vector<double>();
  EXPECT_EQ(b.forward(x, true).to_vector<double>(), y0);  // same seed, same step
  const auto y1 = a.forward(x, true).to_vector<double>();
  EXPECT_NE(y1, y0);  // the step advanced
  int kept = 0;
  for (double v : y1) {
    ASSERT_TRUE(v == 0.0 || v == 1.0 / 0.75) << v;
    kept += v != 0.0;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<int>(y1.size()));
  // dL/dx of sum(y) is exactly y / x = y for x = 1: the same mask and scale.
  EXPECT_EQ(a.backward(x).to_vector<double>(), y1);
  // Resuming at step 1 reproduces step 1's mask.
  Dropout c("c", 0.25, 42);
  c.set_step(1);
  EXPECT_EQ(c.forward(x, true).to_vector<double>(), y1);
}

TEST(DropoutLayer, RejectsBadProbabilityAndMismatchedGradient) {
  EXPECT_THROW(Dropout("bad", 1.5, 0), InternalError);
  Dropout d("d", 0.5, 0);
  d.forward(Tensor::zeros({2, 3}), true);
  EXPECT_THROW(d.backward(Tensor::zeros({3, 2})), InternalError);
}

}  // namespace
}  // namespace aiacc::models
