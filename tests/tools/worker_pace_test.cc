// The end-of-run pace of the workers: the slowest and fastest by compute per step, the spread
// between them, its description, and the test hook that slows one worker down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "tools/trainer/worker_pace.h"

namespace aiacc::trainer {
namespace {

TEST(WorkerPace, NamesTheSlowestAndFastestAndTheirSpread) {
  EXPECT_FALSE(worker_pace({}).has_value());
  EXPECT_FALSE(worker_pace({1.0}).has_value());
  const auto two = worker_pace({0.71, 0.84});
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->slowest, 1);
  EXPECT_EQ(two->fastest, 0);
  EXPECT_NEAR(two->spread(), 0.84 / 0.71 - 1, 1e-12);
  EXPECT_EQ(two->describe(), "compute per step (training time less communication wait): worker 1 0.840 ms, the "
                             "slowest, 18% above worker 0's 0.710 ms");
  const auto four = worker_pace({1.0, 0.9, 1.5, 1.1});
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(four->slowest, 2);
  EXPECT_EQ(four->fastest, 1);
  EXPECT_THAT(four->describe(), ::testing::EndsWith("worker 1's 0.900 ms (median 1.050 ms)"));
  EXPECT_EQ(worker_pace({0.0, 0.0})->spread(), 0.0);  // no steps: no spread, not a division by 0
}

TEST(WorkerPace, TheSlowWorkerHookTakesRankAndMicroseconds) {
  ::unsetenv("AIACC_TEST_SLOW_WORKER");
  EXPECT_EQ(slow_worker_micros(1), 0);
  ::setenv("AIACC_TEST_SLOW_WORKER", "1:2500", 1);
  EXPECT_EQ(slow_worker_micros(1), 2500);
  EXPECT_EQ(slow_worker_micros(0), 0);
  for (const char* bad : {"1", "x:5", "1:-3", "1:5ms"}) {
    ::setenv("AIACC_TEST_SLOW_WORKER", bad, 1);
    EXPECT_THROW(slow_worker_micros(1), ConfigError) << bad;
  }
  ::unsetenv("AIACC_TEST_SLOW_WORKER");
}

}  // namespace
}  // namespace aiacc::trainer
