// LrSchedule against independent references: PyTorch's chainable (recursive) forms of StepLR,
// MultiStepLR and ExponentialLR simulated step by step, the closed forms of CosineAnnealingLR
// and LinearLR, and LinearLR-style warm-up.
#include "core/optim/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace aiacc::optim {
namespace {

using ::testing::HasSubstr;

ScheduleOptions schedule(const std::string& type, std::int64_t warmup = 0) {
  ScheduleOptions o;
  o.type = type;
  o.warmup_steps = warmup;
  return o;
}

// lr at warm-up step s: PyTorch LinearLR(start_factor=f, end_factor=1, total_iters=W).
double warmup_reference(double base, double f, std::int64_t s, std::int64_t w) {
  return base * (f + (1.0 - f) * static_cast<double>(std::min(s, w)) / static_cast<double>(w));
}

TEST(LrSchedule, ConstantWithWarmup) {
  ScheduleOptions o = schedule("constant", 4);
  o.warmup_start_factor = 0.25;
  const LrSchedule s(o, 0.8, 0);
  for (std::int64_t step = 0; step < 4; ++step) {
    EXPECT_DOUBLE_EQ(s.lr_at(step), warmup_reference(0.8, 0.25, step, 4)) << step;
  }
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.2);
  for (std::int64_t step = 4; step < 20; ++step) EXPECT_DOUBLE_EQ(s.lr_at(step), 0.8);
}

TEST(LrSchedule, StepMatchesChainableStepLR) {
  ScheduleOptions o = schedule("step", 3);
  o.step_size = 4;
  o.gamma = 0.5;
  const LrSchedule s(o, 1.0, 0);
  double lr = 1.0;  // StepLR.get_lr: multiply by gamma when t > 0 and t % step_size == 0
  for (std::int64_t t = 0; t < 30; ++t) {
    if (t > 0 && t % 4 == 0) lr *= 0.5;
    EXPECT_NEAR(s.lr_at(3 + t), lr, 1e-15) << t;
  }
}

TEST(LrSchedule, MultistepMatchesChainableMultiStepLR) {
  ScheduleOptions o = schedule("multistep", 2);
  o.milestones = {3, 7, 8};
  o.gamma = 0.3;
  const LrSchedule s(o, 0.6, 0);
  double lr = 0.6;
  for (std::int64_t t = 0; t < 15; ++t) {
    for (std::int64_t m : o.milestones)
      if (t == m) lr *= 0.3;
    EXPECT_NEAR(s.lr_at(2 + t), lr, 1e-15) << t;
  }
}

TEST(LrSchedule, ExponentialMatchesPerStepDecay) {
  ScheduleOptions o = schedule("exponential");
  o.gamma = 0.97;
  const LrSchedule s(o, 0.5, 0);
  double lr = 0.5;
  for (std::int64_t t = 0; t < 50; ++t) {
    EXPECT_NEAR(s.lr_at(t), lr, 1e-14) << t;
    lr *= 0.97;
  }
}

TEST(LrSchedule, CosineMatchesClosedFormAndHitsBothEnds) {
  ScheduleOptions o = schedule("cosine", 10);
  o.min_lr = 0.01;
  const std::int64_t total = 110;
  const LrSchedule s(o, 0.4, total);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);   // warmup_start_factor 0
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.4);  // warm-up end: the full rate
  const double span = 100.0;
  for (std::int64_t step = 10; step <= total; ++step) {
    const double t = static_cast<double>(step - 10);
    const double expected =
        0.01 + (0.4 - 0.01) * (1.0 + std::cos(std::numbers::pi * t / span)) / 2.0;
    EXPECT_NEAR(s.lr_at(step), expected, 1e-15) << step;
  }
  EXPECT_NEAR(s.lr_at(60), (0.4 + 0.01) / 2.0, 1e-15);  // halfway
  EXPECT_NEAR(s.lr_at(total), 0.01, 1e-15);
  EXPECT_NEAR(s.lr_at(total + 500), 0.01, 1e-15);  // stays at the floor
  for (std::int64_t step = 11; step <= total; ++step) EXPECT_LT(s.lr_at(step), s.lr_at(step - 1));
}

TEST(LrSchedule, LinearDecaysToMinLr) {
  ScheduleOptions o = schedule("linear", 5);
  o.min_lr = 0.1;
  o.total_steps = 25;  // the option wins over the trainer's count
  const LrSchedule s(o, 1.1, 1000);
  EXPECT_EQ(s.total_steps(), 25);
  for (std::int64_t step = 5; step <= 40; ++step) {
    // LinearLR(start_factor=1, end_factor=min/base, total_iters=20)
    const double t = static_cast<double>(std::min<std::int64_t>(step - 5, 20));
    EXPECT_NEAR(s.lr_at(step), 1.1 * (1.0 + (0.1 / 1.1 - 1.0) * t / 20.0), 1e-14) << step;
  }
}

std::string config_error(const ScheduleOptions& o, std::int64_t total) {
  try {
    LrSchedule(o, 0.1, total);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

TEST(LrSchedule, RejectsSchedulesWithoutTheirInputs) {
  EXPECT_THAT(config_error(schedule("cosine"), 0), HasSubstr("schedule.total_steps"));
  EXPECT_THAT(config_error(schedule("linear", 50), 50),
              HasSubstr("leave no room after warmup_steps"));
  ScheduleOptions high = schedule("cosine");
  high.min_lr = 0.5;
  EXPECT_THAT(config_error(high, 100), HasSubstr("schedule.min_lr"));
  ScheduleOptions bad_step = schedule("step");
  bad_step.step_size = 0;
  EXPECT_THAT(config_error(bad_step, 0), HasSubstr("schedule.step_size"));
  EXPECT_THAT(config_error(schedule("cosinus"), 100), HasSubstr("schedule.type"));
}

}  // namespace
}  // namespace aiacc::optim
