// FindOnceCache: one find per key, also under concurrent callers, and nothing kept from a
// find that threw.
#include "core/util/find_once_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace aiacc {
namespace {

TEST(FindOnceCache, FindsEachKeyOnceEvenUnderConcurrentCallers) {
  FindOnceCache<std::string, int> cache;
  std::atomic<int> finds{0};
  std::vector<std::thread> threads;
  std::vector<int> seen(16);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      seen[t] = cache.get_or_find(t % 2 ? "odd" : "even", [&] {
        ++finds;
        return t % 2 ? 1 : 2;
      });
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(finds.load(), 2);
  EXPECT_EQ(cache.size(), 2u);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(seen[t], t % 2 ? 1 : 2);
}

TEST(FindOnceCache, AFailedFindIsTriedAgain) {
  FindOnceCache<int, int> cache;
  EXPECT_THROW(cache.get_or_find(7, []() -> int { throw std::runtime_error("no algorithm"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.get_or_find(7, [] { return 3; }), 3);
  EXPECT_EQ(cache.get_or_find(7, [] { return 4; }), 3);
}

}  // namespace
}  // namespace aiacc
