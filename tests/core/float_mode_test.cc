// flush_denormals: a subnormal result becomes 0 on the calling thread and on OpenMP's threads
// while it is on, and is exact again once it is off.
#include "core/util/float_mode.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <thread>
#include <vector>

namespace aiacc {
namespace {

// Halves the smallest normal float: a subnormal, unless the thread flushes it to zero. The
// volatile keeps the compiler from folding it at compile time.
float half_of_smallest_normal() {
  volatile float x = FLT_MIN;
  volatile float half = 0.5f;
  return x * half;
}

class FloatModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!util::flush_denormals(false)) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  }
  void TearDown() override { util::flush_denormals(false); }
};

TEST_F(FloatModeTest, SubnormalsAreExactByDefaultAndZeroWhenFlushing) {
  EXPECT_FALSE(util::flushing_denormals());
  EXPECT_EQ(std::fpclassify(half_of_smallest_normal()), FP_SUBNORMAL);
  ASSERT_TRUE(util::flush_denormals(true));
  EXPECT_TRUE(util::flushing_denormals());
  EXPECT_EQ(half_of_smallest_normal(), 0.0f);
  util::flush_denormals(false);
  EXPECT_EQ(std::fpclassify(half_of_smallest_normal()), FP_SUBNORMAL);
}

TEST_F(FloatModeTest, EveryOpenMpThreadAndLaterThreadsFlushToo) {
  omp_set_num_threads(4);
  ASSERT_TRUE(util::flush_denormals(true));
  std::vector<float> results(4, -1.0f);
  std::vector<int> flushing(4, 0);
#pragma omp parallel num_threads(4)
  {
    const int t = omp_get_thread_num();
    results[static_cast<std::size_t>(t)] = half_of_smallest_normal();
    flushing[static_cast<std::size_t>(t)] = util::flushing_denormals() ? 1 : 0;
  }
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(results[static_cast<std::size_t>(t)], 0.0f) << "OpenMP thread " << t;
    EXPECT_EQ(flushing[static_cast<std::size_t>(t)], 1) << "OpenMP thread " << t;
  }
  // A thread started afterwards inherits the mode of the thread that starts it.
  float from_new_thread = -1.0f;
  std::thread([&] { from_new_thread = half_of_smallest_normal(); }).join();
  EXPECT_EQ(from_new_thread, 0.0f);
  util::flush_denormals(false);
#pragma omp parallel num_threads(4)
  results[static_cast<std::size_t>(omp_get_thread_num())] = half_of_smallest_normal();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(std::fpclassify(results[static_cast<std::size_t>(t)]), FP_SUBNORMAL) << t;
}

}  // namespace
}  // namespace aiacc
