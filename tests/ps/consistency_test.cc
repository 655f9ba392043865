// Consistency across workers (ranks as threads on loopback): synchronous tables apply the
// average of all workers' step gradients once (equal to a reference fed that average) and a
// push completes only when every worker pushed; bounded staleness is never exceeded (checked on
// both sides: the server's record and the workers' own step counters); SyncAggregator and
// StalenessClock units.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "core/error.h"
#include "ps/consistency.h"
#include "ps/remote_embedding_store.h"
#include "tests/ps/ps_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::ps {
namespace {

using testing::Cluster;
using testing::table_config;

TEST(SyncAggregator, MergesInWorkerOrderAndAverages) {
  SyncAggregator aggregator(2, /*average=*/true, 2);
  const std::vector<std::int64_t> ids1{5, 7};
  const std::vector<float> g1{1, 2, 3, 4};
  const std::vector<std::int64_t> ids0{7, 9};
  const std::vector<float> g0{10, 20, 30, 40};
  Contribution c1{1, 1, ids1, g1.data(), 0.1, nullptr, "b"};
  aggregator.add(0, c1);
  ReadyStep ready;
  EXPECT_FALSE(aggregator.pop_ready(ready));
  EXPECT_TRUE(aggregator.pending(1, 1));
  EXPECT_NE(aggregator.describe_waiting().find("workers 0"), std::string::npos);
  Contribution c0{0, 1, ids0, g0.data(), 0.1, nullptr, "a"};
  aggregator.add(0, c0);
  ASSERT_TRUE(aggregator.pop_ready(ready));
  EXPECT_EQ(ready.ids, (std::vector<std::int64_t>{7, 9, 5}));  // worker 0's ids first
  EXPECT_EQ(ready.grads, (std::vector<float>{6.5f, 12.0f, 15.0f, 20.0f, 0.5f, 1.0f}));
  EXPECT_THROW(aggregator.add(0, c0), CommError);  // step 0 already applied
  aggregator.add(1, c0);
  EXPECT_THROW(aggregator.add(1, c0), CommError);  // twice for one step
}

TEST(StalenessClock, LagIsStepMinusSlowest) {
  StalenessClock clock(3, 1);
  EXPECT_TRUE(clock.may_serve(1));
  EXPECT_FALSE(clock.may_serve(2));
  clock.advance(0, 0);
  clock.advance(1, 0);
  EXPECT_EQ(clock.slowest_worker(), 2);
  EXPECT_FALSE(clock.may_serve(2));
  clock.advance(2, 0);
  EXPECT_TRUE(clock.may_serve(2));
  EXPECT_EQ(clock.lag(2), 1);
}

TEST(PsConsistency, SyncPushWaitsForEveryWorkerAndAppliesTheAverage) {
  Cluster cluster(2);
  constexpr int kWorkers = 3;
  constexpr int kDim = 4;
  const TableConfig config = table_config("sync", kDim, "adagrad", "sync", kWorkers);
  auto reference = testing::reference_store(config);
  std::vector<std::shared_ptr<PsClient>> clients;
  for (int w = 0; w < kWorkers; ++w) {
    clients.push_back(cluster.client(w));
    clients.back()->create_table(config);
  }
  for (std::uint64_t step = 0; step < 4; ++step) {
    std::vector<std::vector<std::int64_t>> ids(kWorkers);
    std::vector<std::vector<float>> grads(kWorkers);
    std::vector<Ticket> tickets;
    for (int w = 0; w < kWorkers; ++w) {
      ids[w] = testing::random_ids(300, 400, step * 10 + w);
      grads[w] = testing::random_grads(ids[w].size(), kDim, step * 10 + w);
      tickets.push_back(clients[w]->push("sync", ids[w], grads[w].data(), 0.05, step));
      if (w + 1 < kWorkers) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        EXPECT_FALSE(clients[0]->ready(tickets[0])) << "a sync push completed before all pushed";
      }
    }
    for (int w = 0; w < kWorkers; ++w) clients[w]->wait(tickets[w]);
    // Reference: each worker's ids aggregated locally, then summed in worker order, averaged.
    std::vector<std::int64_t> all_ids;
    std::vector<float> all_grads;
    for (int w = 0; w < kWorkers; ++w) {
      std::vector<std::int64_t> u;
      std::vector<float> s;
      testing::aggregate(ids[w], grads[w], kDim, u, s);
      all_ids.insert(all_ids.end(), u.begin(), u.end());
      all_grads.insert(all_grads.end(), s.begin(), s.end());
    }
    std::vector<std::int64_t> merged;
    std::vector<float> summed;
    testing::aggregate(all_ids, all_grads, kDim, merged, summed);
    for (float& g : summed) g /= static_cast<float>(kWorkers);
    reference->push(merged, summed.data(), 0.05);

    const auto probe = testing::random_ids(500, 400, 777);
    std::vector<float> rows(probe.size() * kDim);
    std::vector<float> expected(rows.size());
    clients[1]->wait(clients[1]->pull("sync", probe, rows.data(), step + 1));
    reference->pull(probe, expected.data());
    ASSERT_EQ(rows, expected) << "step " << step;
  }
}

// A sync step that cannot be applied fails every worker's push of it, not only the one whose
// push completed the step: the others would otherwise retry and be acknowledged as repeats.
TEST(PsConsistency, ASyncStepThatFailsToApplyFailsEveryWorkersPush) {
  ServerOptions options;
  options.fail_sync_step_for_testing = 1;
  Cluster cluster(1, options);
  constexpr int kWorkers = 2;
  const TableConfig c = table_config("sync_fail", 4, "sgd", "sync", kWorkers);
  std::array<std::string, kWorkers> errors;
  aiacc::testing::run_ranks(kWorkers, [&](int w) {
    ClientOptions client_options;
    client_options.retry_interval_s = 0.2;  // a lost answer would be retried well within the test
    auto client = cluster.client(w, client_options);
    client->create_table(c);
    const std::vector<std::int64_t> ids{1, 2, 3};
    const std::vector<float> grads(ids.size() * 4, 0.5f);
    client->wait(client->push("sync_fail", ids, grads.data(), 0.1, 0));  // step 0 applies
    try {
      client->wait(client->push("sync_fail", ids, grads.data(), 0.1, 1));
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(w)] = e.what();
    }
  });
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_THAT(errors[static_cast<std::size_t>(w)], ::testing::HasSubstr("injected failure")) << "worker " << w;
  }
}

TEST(PsConsistency, BoundedStalenessIsNeverExceeded) {
  for (int staleness : {0, 2}) {
    Cluster cluster(2);
    constexpr int kWorkers = 3;
    constexpr int kSteps = 12;
    TableConfig c = table_config("bounded", 4, "sgd", "bounded", kWorkers);
    c.options.staleness = staleness;
    std::array<std::atomic<int>, kWorkers> pushes_started{};
    std::atomic<int> worst{0};
    aiacc::testing::run_ranks(kWorkers, [&](int w) {
      auto client = cluster.client(w);
      client->create_table(c);
      for (int step = 0; step < kSteps; ++step) {
        const auto ids = testing::random_ids(100, 1000, step * 7 + w);
        std::vector<float> rows(ids.size() * 4);
        client->wait(client->pull("bounded", ids, rows.data(), step));
        // Every worker that the server counted as done with a step had started its push.
        int slowest = kSteps;
        for (const auto& p : pushes_started) slowest = std::min(slowest, p.load());
        int lag = step - slowest;
        int seen = worst.load();
        while (lag > seen && !worst.compare_exchange_weak(seen, lag)) {
        }
        if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow one
        const auto grads = testing::random_grads(ids.size(), 4, step);
        pushes_started[w].fetch_add(1);
        client->wait(client->push("bounded", ids, grads.data(), 0.1, step));
      }
    });
    EXPECT_LE(worst.load(), staleness);
    auto client = cluster.client(0);
    for (const auto& shard : client->stats()) {
      EXPECT_LE(shard[0].max_staleness, staleness);
      if (staleness > 0) {
        EXPECT_GE(shard[0].max_staleness, 1) << "the fast workers never ran ahead";
      }
    }
  }
}

// A synchronous step that one worker never pushes (its process frozen) is given up by the shard
// at 0.8 of wait_timeout_s, before the pushing worker's own deadline: the push fails naming the
// missing worker. It used to time out on the client, blaming the shard, which was alive.
TEST(PsConsistency, AStepAWorkerNeverPushesFailsNamingThatWorker) {
  ServerOptions server;
  server.wait_timeout_s = 2;
  Cluster cluster(1, server);
  const TableConfig c = table_config("sync_frozen", 4, "sgd", "sync", 3);
  ClientOptions options;
  options.timeout_s = 30;
  auto client = cluster.client(0, options);
  client->create_table(c);
  auto other = cluster.client(2, options);
  other->create_table(c);
  const std::vector<std::int64_t> ids = {1, 2, 3};
  const std::vector<float> grads(ids.size() * 4, 1.0f);
  auto pending = other->push("sync_frozen", ids, grads.data(), 0.1, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    client->wait(client->push("sync_frozen", ids, grads.data(), 0.1, 0));
    FAIL() << "the push of a step worker 1 never pushed was applied";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("table 'sync_frozen' step 0: waiting for workers 1 for"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("giving up on the step"));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "the shard did not give up before the client's own timeout (30 s)";
  EXPECT_THROW(other->wait(pending), Error);
}

// A job resumed at step 10 starts with pulls, before any push: a pull at step k says its
// worker completed k steps, so the workers' first pulls are served once each has pulled. The
// shards' clocks used to stay at 0 until a push, so every pull past the bound waited for pushes
// that could not come, and the resumed job failed at its first step (held for wait_timeout_s).
// A worker ahead of the bound still waits for the slowest one's pull.
TEST(PsConsistency, AResumedBoundedJobsFirstPullsAreServed) {
  ServerOptions server;
  server.wait_timeout_s = 5;
  Cluster cluster(1, server);
  TableConfig c = table_config("bounded", 4, "sgd", "bounded", 2);
  c.options.staleness = 1;
  std::atomic<bool> slow_pulled{false}, slow_pushed{false};
  std::atomic<bool> served_early{false};
  aiacc::testing::run_ranks(2, [&](int w) {
    auto client = cluster.client(w);
    client->create_table(c);
    const std::vector<std::int64_t> ids = {1, 2, 3};
    std::vector<float> rows(ids.size() * 4);
    if (w == 0) {  // the slow worker
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      slow_pulled = true;
      client->wait(client->pull("bounded", ids, rows.data(), 10));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      slow_pushed = true;
      client->wait(client->push("bounded", ids, rows.data(), 0.0, 10));
    } else {
      // Held until worker 0 pulls at 10 (until then its clock is 0, 10 steps behind).
      client->wait(client->pull("bounded", ids, rows.data(), 10));
      if (!slow_pulled) served_early = true;
      client->wait(client->push("bounded", ids, rows.data(), 0.0, 10));
      client->wait(client->push("bounded", ids, rows.data(), 0.0, 11));
      // Step 12 is 2 ahead of worker 0's 10: held until it pushes step 10.
      client->wait(client->pull("bounded", ids, rows.data(), 12));
      if (!slow_pushed) served_early = true;
    }
  });
  EXPECT_FALSE(served_early);
}

// A prefetch sent while this worker's push to a sync table still waits for the other worker's
// (push_async() without wait_push()) is answered with the rows before the step's update; the
// pull after the step must not use it. It used to: the pulled rows missed the step's update.
TEST(PsConsistency, ASyncPrefetchSentBeforeThePushAppliedIsNotUsed) {
  Cluster cluster(1);
  TableConfig c = table_config("sync_prefetch", 4, "sgd", "sync", 2);
  RemoteEmbeddingStore a(cluster.client(0), c), b(cluster.client(1), c);
  const std::vector<std::int64_t> ids = {1, 2, 3};
  const std::vector<float> grads(ids.size() * 4, 1.0f);
  std::vector<float> rows(ids.size() * 4), direct(ids.size() * 4);
  a.push_async(ids, grads.data(), 1.0);  // step 0 of worker 0: waits for worker 1's
  a.prefetch(ids);                       // answered now, with the rows before step 0
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    b.push(ids, grads.data(), 1.0);  // completes step 0: applied
  });
  a.pull(ids, rows.data());
  other.join();
  a.client().wait(a.client().pull("sync_prefetch", ids, direct.data(), 1));
  EXPECT_EQ(rows, direct);
}

TEST(PsConsistency, ABoundedPushFromAnUnknownWorkerChangesNothing) {
  // Worker 5 of a 2-worker bounded table: refused with an error naming it, before its rows are
  // applied, and refused again when retried (never acknowledged as a duplicate).
  Cluster cluster(1);
  TableConfig c = table_config("bounded", 4, "sgd", "bounded", 2);
  auto member = cluster.client(0);
  member->create_table(c);
  const std::vector<std::int64_t> ids = {1, 2, 3};
  std::vector<float> before(ids.size() * 4);
  member->wait(member->pull("bounded", ids, before.data(), 0));
  ClientOptions options;
  options.duplicate_pushes_for_testing = true;
  auto stranger = cluster.client(5, options);
  stranger->create_table(c);
  const std::vector<float> grads(ids.size() * 4, 100.0f);
  try {
    stranger->wait(stranger->push("bounded", ids, grads.data(), 1.0, 0));
    FAIL() << "a push from worker 5 of 2 was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("from worker 5, but the table has 2 workers"), std::string::npos)
        << e.what();
  }
  std::vector<float> after(ids.size() * 4);
  member->wait(member->pull("bounded", ids, after.data(), 0));
  EXPECT_EQ(after, before);
}

TEST(PsConsistency, AsyncWorkersAllLand) {
  Cluster cluster(2);
  constexpr int kWorkers = 3;
  const TableConfig config = table_config("async", 2, "sgd", "async", kWorkers);
  aiacc::testing::run_ranks(kWorkers, [&](int w) {
    auto client = cluster.client(w);
    client->create_table(config);
    const std::vector<std::int64_t> ids{1, 2, 3};
    const std::vector<float> grads(6, 1.0f);
    for (int step = 0; step < 5; ++step) {
      client->wait(client->push("async", ids, grads.data(), 0.1, step));
    }
  });
  // SGD is linear: 15 pushes of gradient 1 at lr 0.1 move every weight by exactly -1.5 (up to
  // rounding) from its initial value, whatever the interleaving.
  auto client = cluster.client(0);
  client->create_table(config);
  auto reference = testing::reference_store(config);
  const std::vector<std::int64_t> ids{1, 2, 3};
  std::vector<float> rows(6);
  std::vector<float> initial(6);
  client->wait(client->pull("async", ids, rows.data(), 0));
  reference->pull(ids, initial.data());
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_NEAR(rows[i], initial[i] - 1.5f, 1e-5);
}

}  // namespace
}  // namespace aiacc::ps
