// FindOnceCache: what is remembered is found again, the first value of a key stays, and
// concurrent callers all see one value per key.
#include "core/util/find_once_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace aiacc {
namespace {

TEST(FindOnceCache, KeepsTheFirstValueOfAKey) {
  FindOnceCache<int, int> cache;
  EXPECT_FALSE(cache.lookup(7).has_value());
  EXPECT_EQ(cache.remember(7, 3), 3);
  EXPECT_EQ(cache.remember(7, 4), 3);  // a later measurement does not replace it
  EXPECT_EQ(cache.lookup(7), 3);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FindOnceCache, ConcurrentCallersSeeOneValuePerKey) {
  FindOnceCache<std::string, int> cache;
  std::vector<std::thread> threads;
  std::vector<int> seen(16);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = t % 2 ? "odd" : "even";
      const auto cached = cache.lookup(key);
      seen[t] = cached ? *cached : cache.remember(key, t);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.size(), 2u);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(seen[t], *cache.lookup(t % 2 ? "odd" : "even")) << t;
}

}  // namespace
}  // namespace aiacc
