// Admission (a row is created only after min_count requests of its id) and capacity-bounded
// eviction (least recently touched rows dropped; they come back with their initial value).
#include <gtest/gtest.h>

#include "ps/server_table.h"
#include "tests/ps/ps_fixture.h"

namespace aiacc::ps {
namespace {

TEST(PsAdmission, RowsAreCreatedOnlyAfterMinCountRequests) {
  testing::Cluster cluster(2);
  auto client = cluster.client();
  TableConfig config = testing::table_config("admit", 4, "sgd");
  config.options.min_count = 3;
  client->create_table(config);
  auto fresh = testing::reference_store(config);
  const std::vector<std::int64_t> ids{11, 22, 33};
  std::vector<float> rows(12);
  std::vector<float> initial(12);
  fresh->pull(ids, initial.data());
  const std::vector<float> grads(12, 1.0f);
  // Request 1 (pull) and 2 (push): not admitted; the pull shows the initial value and the push
  // is dropped.
  client->wait(client->pull("admit", ids, rows.data(), 0));
  EXPECT_EQ(rows, initial);
  client->wait(client->push("admit", ids, grads.data(), 0.5, 0));
  std::int64_t rows_held = 0;
  std::int64_t dropped = 0;
  for (const auto& shard : client->stats()) {
    rows_held += shard[0].rows;
    dropped += shard[0].not_admitted_rows;
  }
  EXPECT_EQ(rows_held, 0);
  EXPECT_EQ(dropped, 3);
  // Request 3 admits them: the push applies.
  client->wait(client->push("admit", ids, grads.data(), 0.5, 1));
  client->wait(client->pull("admit", ids, rows.data(), 2));
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_FLOAT_EQ(rows[i], initial[i] - 0.5f);
}

// A pull that arrives twice (a retry after a lost reply) is served twice but counts once
// towards admission and in the pulled rows: as above, a pull and a push leave min_count 3 unmet.
TEST(PsAdmission, ARepeatedPullCountsOnce) {
  testing::Cluster cluster(2);
  ClientOptions options;
  options.duplicate_pulls_for_testing = true;
  auto client = cluster.client(0, options);
  TableConfig config = testing::table_config("admit_repeat", 4, "sgd");
  config.options.min_count = 3;
  client->create_table(config);
  const std::vector<std::int64_t> ids{11, 22, 33};
  std::vector<float> rows(12);
  const std::vector<float> grads(12, 1.0f);
  client->wait(client->pull("admit_repeat", ids, rows.data(), 0));
  client->wait(client->push("admit_repeat", ids, grads.data(), 0.5, 0));
  std::int64_t rows_held = 0, dropped = 0, pulled = 0;
  for (const auto& shard : client->stats()) {
    rows_held += shard[0].rows;
    dropped += shard[0].not_admitted_rows;
    pulled += shard[0].pulled_rows;
  }
  EXPECT_EQ(rows_held, 0);
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(pulled, 3);
}

TEST(PsEviction, ShardKeepsAtMostCapacityRowsDroppingTheLeastRecentlyUsed) {
  testing::Cluster cluster(1);
  auto client = cluster.client();
  TableConfig config = testing::table_config("evict", 2, "sgd");
  config.options.capacity_rows = 100;
  config.options.evict_to_fraction = 0.5;
  client->create_table(config);
  auto fresh = testing::reference_store(config);
  std::vector<std::int64_t> hot{1, 2, 3, 4};
  const std::vector<float> grads(8, 1.0f);
  client->wait(client->push("evict", hot, grads.data(), 1.0, 0));
  for (std::uint64_t step = 1; step <= 10; ++step) {
    std::vector<std::int64_t> cold;
    for (int i = 0; i < 30; ++i) cold.push_back(static_cast<std::int64_t>(step * 1000 + i));
    std::vector<float> hot_rows(8);
    client->wait(client->pull("evict", hot, hot_rows.data(), step));  // keeps them recent
    std::vector<float> rows(cold.size() * 2);
    client->wait(client->pull("evict", cold, rows.data(), step));
  }
  const auto stats = client->stats()[0][0];
  EXPECT_LE(stats.rows, 100);
  EXPECT_GT(stats.evicted_rows, 0);
  // The hot rows survived with their update; an evicted cold row is back to its initial value.
  std::vector<float> rows(8);
  std::vector<float> initial(8);
  client->wait(client->pull("evict", hot, rows.data(), 11));
  fresh->pull(hot, initial.data());
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_FLOAT_EQ(rows[i], initial[i] - 1.0f);
}

// Eviction without admission (min_count 1): a retried pull whose rows were evicted since its
// first copy (a lagging worker's pull at an old step evicts its own rows at once) is served
// from the table again. It used to be taken for rows held back by admission and read from the
// admission scratch store, which does not exist without admission: the shard crashed (SIGSEGV).
TEST(PsEviction, ARetriedPullOfEvictedRowsIsServed) {
  TableConfig config = testing::table_config("evict", 4, "adagrad");
  config.options.capacity_rows = 10;
  config.options.evict_to_fraction = 0.5;
  ServerTable table(config, 4);
  std::vector<std::int64_t> recent{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> rows(recent.size() * 4);
  table.pull(recent, rows.data(), /*step=*/5);
  std::vector<std::int64_t> lagging{100, 101, 102, 103, 104};
  std::vector<float> first(lagging.size() * 4), again(lagging.size() * 4);
  table.pull(lagging, first.data(), /*step=*/1);
  ASSERT_GT(table.stats().evicted_rows, 0);
  table.pull(lagging, again.data(), /*step=*/1, /*repeat=*/true);
  EXPECT_EQ(again, first);  // never updated: recreated from (id, seed) alike
  EXPECT_LE(table.stats().rows, 10);
}

// Pulls ids 0 .. count - 1 of a dim-2 table, one per request, id k at step k.
void pull_one_at_a_time(ServerTable& table, std::int64_t count) {
  std::vector<float> row(2);
  for (std::int64_t id = 0; id < count; ++id) {
    const std::vector<std::int64_t> one{id};
    table.pull(one, row.data(), static_cast<std::uint64_t>(id));
  }
}

// evict_to_fraction 1.0 still evicts 1% of the capacity at a time: it used to evict one row
// per new row, each time rebuilding the whole table.
TEST(PsEviction, EvictionDropsAtLeastOnePercentOfTheCapacity) {
  TableConfig config = testing::table_config("evict", 2, "sgd");
  config.options.capacity_rows = 200;
  config.options.evict_to_fraction = 1.0;
  ServerTable table(config, 2);
  pull_one_at_a_time(table, 201);
  EXPECT_EQ(table.stats().rows, 198);
  EXPECT_EQ(table.stats().evicted_rows, 3);
}

// With admission and a capacity, ids seen too rarely to be admitted are forgotten, the older
// half at a time, once they outnumber the capacity: 2000 ids seen once each used to keep 2000
// entries (~50 B each, without bound). An id requested min_count times in a row is admitted.
TEST(PsAdmission, IdsNeverAdmittedDoNotGrowTheShardWithoutBound) {
  TableConfig config = testing::table_config("tail", 2, "sgd");
  config.options.min_count = 3;
  config.options.capacity_rows = 100;
  ServerTable table(config, 2);
  pull_one_at_a_time(table, 2000);
  std::vector<float> row(2);
  EXPECT_EQ(table.stats().rows, 0);
  EXPECT_LE(table.tracked_ids(), 100u);
  const std::vector<std::int64_t> hot{5000};
  for (int k = 0; k < 3; ++k) table.pull(hot, row.data(), 3000);
  EXPECT_EQ(table.stats().rows, 1);
}

}  // namespace
}  // namespace aiacc::ps
