// flush_denormals: a subnormal result becomes 0 on the calling thread and on OpenMP's threads
// while it is on, and is exact again once it is off.
#include "core/util/float_mode.h"

#include <gtest/gtest.h>
#include <omp.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace aiacc {
namespace {

// Halves the smallest normal float: a subnormal result, unless the thread flushes results to
// zero (FTZ). The volatiles keep the compiler from folding it at compile time.
float half_of_smallest_normal() {
  volatile float x = FLT_MIN;
  volatile float half = 0.5f;
  return x * half;
}

// A subnormal input scaled up into the normal range: 2^-128 * 2^24 = 2^-104, unless the thread
// reads subnormal inputs as zero (DAZ).
float subnormal_times_2_to_24() {
  volatile float x = std::bit_cast<float>(std::uint32_t{0x00200000});  // 2^-128
  volatile float scale = 16777216.0f;
  return x * scale;
}

// Bits, not ==: under DAZ a comparison reads a subnormal as zero and would pass.
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

class FloatModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!util::flush_denormals(false)) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  }
  void TearDown() override { util::flush_denormals(false); }
};

TEST_F(FloatModeTest, SubnormalsAreExactByDefaultAndZeroWhenFlushing) {
  EXPECT_FALSE(util::flushing_denormals());
  EXPECT_EQ(bits(half_of_smallest_normal()), 0x00400000u);  // 2^-127, a subnormal
  EXPECT_EQ(subnormal_times_2_to_24(), std::ldexp(1.0f, -104));
  ASSERT_TRUE(util::flush_denormals(true));
  EXPECT_TRUE(util::flushing_denormals());
  EXPECT_EQ(bits(half_of_smallest_normal()), 0u) << "results are flushed (FTZ)";
#if defined(__x86_64__)
  EXPECT_EQ(bits(subnormal_times_2_to_24()), 0u) << "inputs are read as zero (DAZ)";
  EXPECT_NE(_mm_getcsr() & 0x8000u, 0u) << "MXCSR.FTZ";
  EXPECT_NE(_mm_getcsr() & 0x0040u, 0u) << "MXCSR.DAZ";
#endif
  util::flush_denormals(false);
  EXPECT_EQ(bits(half_of_smallest_normal()), 0x00400000u);
  EXPECT_EQ(subnormal_times_2_to_24(), std::ldexp(1.0f, -104));
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
    EXPECT_EQ(bits(results[static_cast<std::size_t>(t)]), 0u) << "OpenMP thread " << t;
    EXPECT_EQ(flushing[static_cast<std::size_t>(t)], 1) << "OpenMP thread " << t;
  }
  // A thread started afterwards inherits the mode of the thread that starts it.
  float from_new_thread = -1.0f;
  std::thread([&] { from_new_thread = half_of_smallest_normal(); }).join();
  EXPECT_EQ(bits(from_new_thread), 0u);
  util::flush_denormals(false);
#pragma omp parallel num_threads(4)
  results[static_cast<std::size_t>(omp_get_thread_num())] = half_of_smallest_normal();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bits(results[static_cast<std::size_t>(t)]), 0x00400000u) << t;
}

}  // namespace
}  // namespace aiacc
