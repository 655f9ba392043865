// RemoteEmbeddingStore's hot-row cache against two shards: a kept row is never older than its
// staleness bound (it equals the table as it was at the start of one of the last
// cache_staleness + 1 steps, and older rows do get served), a bound of 0 serves exactly what the
// shards hold, evictions and prefetches keep that, and the options are checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "ps/remote_embedding_store.h"
#include "tests/ps/ps_fixture.h"

namespace aiacc::ps {
namespace {

using testing::Cluster;

constexpr int kDim = 4;
constexpr std::int64_t kRange = 300;

// A batch of unique ids: about a third from 10 hot ids (in nearly every batch), the rest spread
// over the range, as a CTR feature's values are.
std::vector<std::int64_t> skewed_batch(std::uint64_t seed) {
  Rng rng(seed, 3);
  std::set<std::int64_t> ids;
  for (int i = 0; i < 20; ++i) ids.insert(static_cast<std::int64_t>(rng.below(10)));
  for (int i = 0; i < 40; ++i) ids.insert(static_cast<std::int64_t>(rng.below(kRange)));
  return {ids.begin(), ids.end()};
}

TableConfig cached_table(const std::string& name, std::int64_t cache_rows, int cache_staleness,
                         const std::string& consistency = "async") {
  TableConfig config = testing::table_config(name, kDim, "adagrad", consistency);
  config.options.cache_rows = cache_rows;
  config.options.cache_staleness = cache_staleness;
  return config;
}

// Runs `steps` steps of pull (every third step through a prefetch) and push on `store`, with
// the same pushes on a local reference. Returns, per step, each pulled row and the step of the
// reference snapshot it equals (the latest such step, or -1 when it equals none of them).
struct Observation {
  std::int64_t step;
  std::int64_t id;
  std::int64_t snapshot_step;
};
std::vector<Observation> train(RemoteEmbeddingStore& store, const TableConfig& config, int steps) {
  auto reference = testing::reference_store(config);
  std::vector<std::int64_t> all(kRange);
  for (std::int64_t id = 0; id < kRange; ++id) all[static_cast<std::size_t>(id)] = id;
  std::map<std::int64_t, std::vector<float>> snapshots;  // step -> every row at its start
  std::vector<Observation> seen;
  for (int step = 0; step < steps; ++step) {
    auto& snapshot = snapshots[step];
    snapshot.resize(all.size() * kDim);
    reference->pull(all, snapshot.data());
    const auto ids = skewed_batch(static_cast<std::uint64_t>(step));
    if (step % 3 == 1) store.prefetch(ids);
    std::vector<float> rows(ids.size() * kDim);
    store.pull(ids, rows.data());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::int64_t match = -1;
      for (std::int64_t f = step; f >= 0 && match < 0; --f) {
        const float* want = snapshots[f].data() + static_cast<std::size_t>(ids[i]) * kDim;
        if (std::equal(want, want + kDim, rows.data() + i * kDim)) match = f;
      }
      seen.push_back({step, ids[i], match});
    }
    const auto grads = testing::random_grads(ids.size(), kDim, 500 + static_cast<std::uint64_t>(step));
    if (step % 3 == 2) store.prefetch(skewed_batch(999));  // discarded by the push
    store.push(ids, grads.data(), 0.1);
    reference->push(ids, grads.data(), 0.1);
  }
  return seen;
}

TEST(PsRowCache, KeptRowsAreNeverOlderThanTheBoundAndOlderOnesAreServed) {
  Cluster cluster(2);
  const int bound = 2;
  const TableConfig config = cached_table("cached", 120, bound);
  RemoteEmbeddingStore store(cluster.client(), config);
  const auto seen = train(store, config, 24);
  int stale = 0;
  for (const Observation& o : seen) {
    ASSERT_GE(o.snapshot_step, 0) << "step " << o.step << " id " << o.id << ": a row the table never held";
    ASSERT_LE(o.step - o.snapshot_step, bound) << "step " << o.step << " id " << o.id;
    if (o.snapshot_step < o.step) ++stale;
  }
  EXPECT_GT(stale, 50);  // the hot rows were served from the cache, as old as allowed
  const auto stats = store.cache_stats();
  EXPECT_GT(stats.hits, 200);
  EXPECT_GT(stats.refreshes, 0);
  EXPECT_GT(stats.evictions, 0);  // 120 slots, 300 ids
  // Every pulled row, and the rows of the 8 prefetches the pushes discarded, went through it.
  EXPECT_EQ(stats.hits + stats.misses + stats.refreshes,
            static_cast<std::int64_t>(seen.size() + 8 * skewed_batch(999).size()));
}

TEST(PsRowCache, ABoundOfZeroServesExactlyWhatTheShardsHold) {
  Cluster cluster(2);
  const TableConfig config = cached_table("fresh", 70, 0);
  RemoteEmbeddingStore store(cluster.client(), config);
  for (const Observation& o : train(store, config, 15)) {
    ASSERT_EQ(o.snapshot_step, o.step) << "step " << o.step << " id " << o.id;
  }
  EXPECT_GT(store.cache_stats().evictions, 0);
}

TEST(PsRowCache, LoadedRowsReplaceKeptOnes) {
  Cluster cluster(2);
  RemoteEmbeddingStore store(cluster.client(), cached_table("loaded", 100, 50));
  const auto ids = skewed_batch(1);
  std::vector<float> before(ids.size() * kDim);
  store.pull(ids, before.data());
  const auto saved = store.save_rows();
  store.push(ids, testing::random_grads(ids.size(), kDim, 7).data(), 0.5);
  std::vector<float> rows(before.size());
  store.pull(ids, rows.data());
  EXPECT_EQ(rows, before);  // kept for 50 steps: the push is not seen yet
  store.push(ids, testing::random_grads(ids.size(), kDim, 8).data(), 0.5);
  store.load_rows(saved);
  store.pull(ids, rows.data());
  EXPECT_EQ(rows, before);  // from the loaded rows, not from a kept copy of the pushed ones
  store.set_step(0);
  store.pull(ids, rows.data());
  EXPECT_EQ(rows, before);
}

TEST(PsRowCache, OptionsAreChecked) {
  Cluster cluster(1);
  EXPECT_THAT([&] { RemoteEmbeddingStore store(cluster.client(), cached_table("s", 100, 1, "sync")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("cache_staleness 1 needs consistency async or bounded")));
  RemoteEmbeddingStore store(cluster.client(), cached_table("small", 10, 1));
  const auto ids = skewed_batch(2);
  std::vector<float> rows(ids.size() * kDim);
  EXPECT_THAT([&] { store.pull(ids, rows.data()); },
              ::testing::ThrowsMessage<ConfigError>(::testing::AllOf(
                  ::testing::HasSubstr("table 'small': a batch touches "),
                  ::testing::HasSubstr(" rows, more than the 10 its hot-row cache holds (cluster.ps.cache_rows: 10); "
                                       "set cluster.ps.cache_rows to at least the rows a batch touches in one table"))));
}

}  // namespace
}  // namespace aiacc::ps
