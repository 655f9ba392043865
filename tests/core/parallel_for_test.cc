// util::parallel_for and friends: every index once, a plain loop in index order (no OpenMP
// region at all) wherever a region would have one thread, a region otherwise, and sums equal to
// the loop's.
#include "core/util/parallel_for.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <vector>

namespace aiacc::util {
namespace {

// Sets the OpenMP thread count for one test and puts it back however the test ends.
class Threads {
 public:
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved_); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int saved_ = omp_get_max_threads();
};

// Runs one of the helpers over [0, n) and records, per index, how often it ran and at which
// OpenMP nesting level (0: no region; a region of one thread still counts as a level).
// Each index is written by one iteration only (no dependence between iterations, as the simd
// helper requires): a second visit of an index shows as a count of 2.
struct Visits {
  std::vector<int> count;
  std::vector<int> level;
  std::vector<std::int64_t> order;  // the order of visits, recorded by one-thread plain loops only
  explicit Visits(std::int64_t n) : count(static_cast<std::size_t>(n), 0), level(static_cast<std::size_t>(n), -1) {}
  void visit(std::int64_t i) {
    count[static_cast<std::size_t>(i)] += 1;
    level[static_cast<std::size_t>(i)] = omp_get_level();
  }
};

enum class Helper { plain, simd, dynamic };

Visits run(Helper helper, std::int64_t n, bool large_enough, bool record_order) {
  Visits v(n);
  auto body = [&](std::int64_t i) { v.visit(i); };
  auto ordered_body = [&](std::int64_t i) {
    v.visit(i);
    v.order.push_back(i);
  };
  switch (helper) {
    case Helper::plain:
      if (record_order) {
        parallel_for(std::int64_t{0}, n, large_enough, ordered_body);
      } else {
        parallel_for(std::int64_t{0}, n, large_enough, body);
      }
      break;
    case Helper::simd: parallel_for_simd(std::int64_t{0}, n, large_enough, body); break;
    case Helper::dynamic:
      if (record_order) {
        parallel_for_dynamic(std::int64_t{0}, n, std::int64_t{3}, large_enough, ordered_body);
      } else {
        parallel_for_dynamic(std::int64_t{0}, n, std::int64_t{3}, large_enough, body);
      }
      break;
  }
  return v;
}

TEST(ParallelFor, OneThreadRunsAPlainLoopInIndexOrder) {
  const Threads one(1);
  EXPECT_FALSE(use_threads(true));
  for (Helper helper : {Helper::plain, Helper::simd, Helper::dynamic}) {
    const bool ordered = helper != Helper::simd;
    const Visits v = run(helper, 50, /*large_enough=*/true, ordered);
    for (std::int64_t i = 0; i < 50; ++i) {
      EXPECT_EQ(v.count[static_cast<std::size_t>(i)], 1) << i;
      // Level 0: no parallel region was opened (libgomp's one-thread region ends in a system call).
      EXPECT_EQ(v.level[static_cast<std::size_t>(i)], 0) << i;
      if (ordered) {
        EXPECT_EQ(v.order[static_cast<std::size_t>(i)], i);
      }
    }
  }
}

TEST(ParallelFor, SmallLoopsAndNestedLoopsStayOnTheCallingThread) {
  const Threads two(2);
  EXPECT_TRUE(use_threads(true));
  EXPECT_FALSE(use_threads(false));
  const Visits small = run(Helper::plain, 20, /*large_enough=*/false, /*record_order=*/true);
  for (std::int64_t i = 0; i < 20; ++i) EXPECT_EQ(small.level[static_cast<std::size_t>(i)], 0) << i;
  // Inside a region, a nested one would get one thread: the helpers loop in place instead.
  std::vector<int> nested_levels(2, -1);
  std::vector<int> nested_counts(2, 0);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    EXPECT_FALSE(use_threads(true));
    parallel_for(std::int64_t{0}, std::int64_t{10}, true, [&](std::int64_t) {
      ++nested_counts[static_cast<std::size_t>(t)];
      nested_levels[static_cast<std::size_t>(t)] = omp_get_level();
    });
  }
  for (std::size_t t = 0; t < 2; ++t) {
    EXPECT_EQ(nested_counts[t], 10);
    EXPECT_EQ(nested_levels[t], 1);  // the outer region's level, no deeper
  }
}

TEST(ParallelFor, SeveralThreadsVisitEveryIndexOnceInARegion) {
  const Threads two(2);
  for (Helper helper : {Helper::plain, Helper::simd, Helper::dynamic}) {
    for (std::int64_t n : {0, 1, 7, 1000}) {
      const Visits v = run(helper, n, /*large_enough=*/true, /*record_order=*/false);
      for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(v.count[static_cast<std::size_t>(i)], 1) << "n " << n << ", index " << i;
        EXPECT_EQ(v.level[static_cast<std::size_t>(i)], 1) << "n " << n << ", index " << i;
      }
    }
  }
}

TEST(ParallelFor, SumsAddInIndexOrderOnOneThread) {
  // Terms whose rounded sum depends on the order of addition (checked below): one thread must
  // give the index-order loop's bits.
  std::vector<double> terms;
  for (int i = 0; i < 1000; ++i) terms.push_back(1.0 / (i + 1) + (i % 3 == 0 ? 1e3 : 0.0));
  double forward = 0.0;
  for (const double t : terms) forward += t;
  double backward = 0.0;
  for (auto it = terms.rbegin(); it != terms.rend(); ++it) backward += *it;
  ASSERT_NE(forward, backward) << "the terms no longer tell the orders apart";
  auto term = [&](std::int64_t i) { return terms[static_cast<std::size_t>(i)]; };
  const auto n = static_cast<std::int64_t>(terms.size());
  {
    const Threads one(1);
    EXPECT_EQ(parallel_sum(std::int64_t{0}, n, true, term), forward);
  }
  const Threads two(2);
  EXPECT_EQ(parallel_sum(std::int64_t{0}, n, false, term), forward);
  // Two threads add two halves: the same value up to rounding.
  EXPECT_NEAR(parallel_sum(std::int64_t{0}, n, true, term), forward, 1e-9);
  EXPECT_EQ(parallel_sum(std::int64_t{5}, std::int64_t{5}, true, term), 0.0);
}

}  // namespace
}  // namespace aiacc::util
