// HotRowCache against hand-worked sequences (hits, misses, staleness refreshes, LRU eviction)
// and against a plain reference model on random batches: the cache serves exactly the rows the
// model says are fresh, every requested row ends up in a slot holding it, and no two rows of a
// batch share a slot.
#include "core/embedding/hot_row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"

namespace aiacc::embedding {
namespace {

TEST(HotRowCache, HitsMissesAndStaleness) {
  HotRowCache cache(4, /*max_staleness=*/1);
  RowCachePlan p = cache.plan(std::vector<std::int64_t>{10, 20}, 0);
  EXPECT_EQ(p.fetch_ids, (std::vector<std::int64_t>{10, 20}));
  EXPECT_EQ(p.slot_of, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(p.fetch_slots, p.slot_of);
  p = cache.plan(std::vector<std::int64_t>{20, 10, 30}, 1);  // 10, 20 one step old: fresh
  EXPECT_EQ(p.fetch_ids, (std::vector<std::int64_t>{30}));
  EXPECT_EQ(p.slot_of, (std::vector<std::int32_t>{1, 0, 2}));
  p = cache.plan(std::vector<std::int64_t>{10, 30}, 2);  // 10 is two steps old: fetched again in place
  EXPECT_EQ(p.fetch_ids, (std::vector<std::int64_t>{10}));
  EXPECT_EQ(p.fetch_slots, (std::vector<std::int32_t>{0}));
  EXPECT_EQ(p.slot_of, (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(cache.stats().hits, 3);
  EXPECT_EQ(cache.stats().misses, 3);
  EXPECT_EQ(cache.stats().refreshes, 1);
}

TEST(HotRowCache, EvictsTheLeastRecentlyUsedRow) {
  HotRowCache cache(3, 100);
  cache.plan(std::vector<std::int64_t>{1, 2, 3}, 0);
  cache.plan(std::vector<std::int64_t>{1}, 1);          // order now 1, 3, 2 (2 least recent)
  RowCachePlan p = cache.plan(std::vector<std::int64_t>{4, 3}, 2);
  EXPECT_EQ(p.fetch_ids, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(p.fetch_slots, (std::vector<std::int32_t>{1}));  // 2's slot
  p = cache.plan(std::vector<std::int64_t>{2}, 3);             // 2 is gone: a miss, evicting 1
  EXPECT_EQ(p.fetch_slots, (std::vector<std::int32_t>{0}));
  EXPECT_EQ(cache.stats().evictions, 2);
  EXPECT_EQ(cache.size(), 3);
}

TEST(HotRowCache, RefusesBatchesLargerThanItAndBadSettings) {
  HotRowCache cache(2, 0);
  EXPECT_THROW(cache.plan(std::vector<std::int64_t>{1, 2, 3}, 0), ConfigError);
  EXPECT_THROW(HotRowCache(0, 1), ConfigError);
  EXPECT_THROW(HotRowCache(4, -1), ConfigError);
  cache.plan(std::vector<std::int64_t>{1}, 5);
  EXPECT_THROW(cache.plan(std::vector<std::int64_t>{1}, 4), InternalError);
}

// The reference: a map id -> fetched step and an LRU list, the obvious way.
TEST(HotRowCache, RandomBatchesMatchAReferenceModel) {
  const std::int64_t slots = 50, staleness = 3;
  HotRowCache cache(slots, staleness);
  std::map<std::int64_t, std::int64_t> fetched;  // id -> step
  std::list<std::int64_t> lru;                   // front = most recent
  std::vector<std::int64_t> held(static_cast<std::size_t>(slots), -1);  // slot -> id, from the plans
  std::mt19937_64 rng(3);
  for (std::int64_t step = 0; step < 400; ++step) {
    std::set<std::int64_t> batch_set;
    const std::size_t n = 1 + rng() % 40;
    while (batch_set.size() < n) {
      // Skewed ids: a few hot rows and a long tail.
      batch_set.insert(rng() % 4 == 0 ? static_cast<std::int64_t>(rng() % 200) : static_cast<std::int64_t>(rng() % 8));
    }
    std::vector<std::int64_t> batch(batch_set.begin(), batch_set.end());
    std::shuffle(batch.begin(), batch.end(), rng);
    std::vector<std::int64_t> expected_fetch;
    for (std::int64_t id : batch) {
      auto it = fetched.find(id);
      if (it == fetched.end() || step - it->second > staleness) {
        expected_fetch.push_back(id);
        if (it == fetched.end() && static_cast<std::int64_t>(fetched.size()) == slots) {
          fetched.erase(lru.back());
          lru.pop_back();
        }
        fetched[id] = step;
      }
      lru.remove(id);
      lru.push_front(id);
    }
    const RowCachePlan plan = cache.plan(batch, step);
    ASSERT_EQ(plan.fetch_ids, expected_fetch) << "step " << step;
    for (std::size_t j = 0; j < plan.fetch_ids.size(); ++j) held[static_cast<std::size_t>(plan.fetch_slots[j])] = plan.fetch_ids[j];
    std::set<std::int32_t> used;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      ASSERT_EQ(held[static_cast<std::size_t>(plan.slot_of[i])], batch[i]) << "step " << step << " row " << batch[i];
      ASSERT_TRUE(used.insert(plan.slot_of[i]).second) << "two rows of one batch share slot " << plan.slot_of[i];
    }
  }
  // Each of the 8 hot ids is in almost every batch, so it is pulled once per staleness + 1 steps.
  EXPECT_GT(cache.stats().hits, 8 * 400 / 2);
  EXPECT_GT(cache.stats().evictions, 0);
  EXPECT_GT(cache.stats().refreshes, 0);
}

}  // namespace
}  // namespace aiacc::embedding
