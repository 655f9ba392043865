// IdDeduplicator against std::unordered_map on edge cases (repeats, all equal, empty, extreme
// values) and on large random batches with hashed-CTR-like repetition.
#include "core/kernels/dedup.h"

#include <gtest/gtest.h>

#include <limits>
#include <unordered_map>
#include <vector>

#include "core/util/random.h"

namespace aiacc::kernels {
namespace {

// The obviously correct version: first-seen order through a std::unordered_map.
DedupResult reference_dedup(const std::vector<std::int64_t>& ids) {
  DedupResult r;
  std::unordered_map<std::int64_t, std::int64_t> seen;
  for (std::int64_t id : ids) {
    auto [it, fresh] = seen.emplace(id, static_cast<std::int64_t>(r.unique_ids.size()));
    if (fresh) r.unique_ids.push_back(id);
    r.inverse.push_back(it->second);
  }
  return r;
}

void expect_same(const DedupResult& got, const DedupResult& want) {
  EXPECT_EQ(got.unique_ids, want.unique_ids);
  EXPECT_EQ(got.inverse, want.inverse);
}

TEST(Dedup, RepeatsKeepFirstSeenOrder) {
  const std::vector<std::int64_t> ids = {42, 7, 42, -3, 7, 7, 1000000007, -3};
  const DedupResult r = deduplicate_ids(ids);
  EXPECT_EQ(r.unique_ids, (std::vector<std::int64_t>{42, 7, -3, 1000000007}));
  EXPECT_EQ(r.inverse, (std::vector<std::int64_t>{0, 1, 0, 2, 1, 1, 3, 2}));
}

TEST(Dedup, AllEqualAndEmpty) {
  const DedupResult same = deduplicate_ids(std::vector<std::int64_t>(100, 5));
  EXPECT_EQ(same.unique_ids, std::vector<std::int64_t>{5});
  EXPECT_EQ(same.inverse, std::vector<std::int64_t>(100, 0));
  const DedupResult none = deduplicate_ids({});
  EXPECT_TRUE(none.unique_ids.empty());
  EXPECT_TRUE(none.inverse.empty());
}

TEST(Dedup, ExtremeValuesAreOrdinaryIds) {
  const std::vector<std::int64_t> ids = {std::numeric_limits<std::int64_t>::min(), -1, 0,
                                         std::numeric_limits<std::int64_t>::max(), -1, 0};
  expect_same(deduplicate_ids(ids), reference_dedup(ids));
}

TEST(Dedup, RandomBatchesMatchUnorderedMapAndReuseState) {
  IdDeduplicator dedup;
  DedupResult result;
  // Shrinking and growing batches exercise the reused table (stale slots must not leak).
  for (std::size_t count : {5000u, 17u, 1u, 20000u, 300u}) {
    Rng rng(count);
    std::vector<std::int64_t> ids(count);
    // A small hot set plus a long tail, as hashed CTR ids look.
    for (auto& id : ids) {
      id = rng.uniform() < 0.5 ? static_cast<std::int64_t>(rng.below(20))
                               : static_cast<std::int64_t>(rng.next());
    }
    dedup.run(ids, result);
    SCOPED_TRACE(count);
    expect_same(result, reference_dedup(ids));
  }
}

}  // namespace
}  // namespace aiacc::kernels
