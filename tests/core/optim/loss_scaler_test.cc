// DynamicLossScaler's schedule against hand-worked sequences, unscale_gradients, and the reason
// it exists: fp16 gradients (core/util/half.h) that would flush to zero survive once scaled,
// and an overflow is found, skipped and backed off from until the step fits.
#include "core/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/util/half.h"

namespace aiacc::optim {
namespace {

TEST(LossScaler, GrowsAfterCleanStepsAndBacksOffOnOverflow) {
  LossScalerOptions o;
  o.initial_scale = 8;
  o.growth_interval = 3;
  o.min_scale = 2;
  o.max_scale = 32;
  DynamicLossScaler s(o);
  const std::vector<std::pair<bool, double>> steps = {
      {false, 8}, {false, 8}, {false, 16},  // three clean steps: doubled
      {true, 8},                           // overflow: halved, the count restarts
      {false, 8}, {false, 8}, {false, 16}, {false, 16}, {false, 16}, {false, 32},
      {false, 32}, {false, 32}, {false, 32},  // capped at max_scale
      {true, 16}, {true, 8}, {true, 4}, {true, 2}, {true, 2}};  // floored at min_scale
  int step = 0;
  for (const auto& [overflow, scale_after] : steps) {
    EXPECT_EQ(s.update(overflow), !overflow) << "step " << step;
    EXPECT_EQ(s.scale(), scale_after) << "step " << step;
    ++step;
  }
  EXPECT_EQ(s.skipped_steps(), 6);
  EXPECT_FLOAT_EQ(s.inverse_scale(), 0.5f);
}

TEST(LossScaler, UnscaleMultipliesAndFindsNonFiniteValues) {
  std::vector<float> g = {1, -2, 4096, 0};
  EXPECT_FALSE(unscale_gradients(g, 0.25f));
  EXPECT_EQ(g, (std::vector<float>{0.25f, -0.5f, 1024, 0}));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> h = {1, bad, 3};
    EXPECT_TRUE(unscale_gradients(h, 0.5f)) << bad;
    EXPECT_EQ(h[2], 1.5f);
  }
}

// Gradients in fp16: what a half-precision backward would hand back for a loss scaled by s.
std::vector<float> fp16_gradients(const std::vector<double>& true_grads, float scale) {
  std::vector<float> out;
  for (double g : true_grads) out.push_back(to_float(to_half(static_cast<float>(g * scale))));
  return out;
}

TEST(LossScaler, SmallFp16GradientsSurviveAndOverflowsAreSkipped) {
  const std::vector<double> true_grads = {2e-8, -1e-7, 2.5e-6, 0.01, -1.5};
  // Unscaled, fp16 flushes 2e-8 to zero (below half its smallest subnormal, 6e-8) and keeps
  // -1e-7 only as two subnormal steps (a third of it lost).
  const auto plain = fp16_gradients(true_grads, 1.0f);
  EXPECT_EQ(plain[0], 0.0f);
  EXPECT_GT(std::fabs(plain[1] + 1e-7f), 1e-8f);
  // With the default scale the largest one overflows fp16 (1.5 * 65536 > 65504) ...
  DynamicLossScaler scaler;
  int attempts = 0;
  std::vector<float> grads;
  for (;;) {
    ++attempts;
    grads = fp16_gradients(true_grads, scaler.scale());
    const bool overflow = unscale_gradients(grads, scaler.inverse_scale());
    if (scaler.update(overflow)) break;
    ASSERT_LT(attempts, 20);
  }
  // ... so the scaler backs off once (to 32768, where 1.5 * s fits) and the step runs.
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  for (std::size_t i = 0; i < true_grads.size(); ++i) {
    // fp16 keeps 11 significant bits; the scaled 2e-8 sits at 6.6e-4, a normal fp16 number.
    EXPECT_NEAR(grads[i], true_grads[i], std::fabs(true_grads[i]) * 1e-3) << i;
  }
}

TEST(LossScaler, BadOptionsAndCheckpointsAreRefused) {
  LossScalerOptions o;
  o.backoff_factor = 1.0;
  EXPECT_THROW(DynamicLossScaler{o}, ConfigError);
  o = {};
  o.initial_scale = 1e9;  // above max_scale
  EXPECT_THROW(DynamicLossScaler{o}, ConfigError);
  DynamicLossScaler s;
  s.restore(1024, 5);
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.clean_steps_in_a_row(), 5);
  EXPECT_THROW(s.restore(0.5, 0), DataError);
  EXPECT_THROW(s.restore(1024, 2000), DataError);
}

}  // namespace
}  // namespace aiacc::optim
