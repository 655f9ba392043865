// Client + in-process shards on loopback: pull/push/optimiser results equal a single-process
// LocalEmbeddingStore fed the same (aggregated) requests, for every sparse optimiser and shard
// count; ids on one shard, empty and very large requests; retried and duplicated pushes are
// applied once; errors name the shard, the table and the operation.
#include <zmq.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/net/socket.h"
#include "ps/protocol.h"
#include "ps/sharding.h"
#include "ps/remote_embedding_store.h"
#include "tests/ps/ps_fixture.h"

namespace aiacc::ps {
namespace {

using testing::Cluster;
using testing::table_config;

// Every row of `table` on the shards and its optimiser state equal the reference's, bit for bit.
void expect_same_rows(PsClient& client, const std::string& table, const EmbeddingStore& reference) {
  const auto got = client.dump_rows(table);
  const auto want = reference.save_rows();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    ASSERT_EQ(got[i].second.shape(), want[i].second.shape()) << got[i].first;
    EXPECT_EQ(0, std::memcmp(got[i].second.raw_data(), want[i].second.raw_data(),
                             got[i].second.num_bytes())) << got[i].first;
  }
}

// Runs `steps` pull+push rounds on the cluster and on the reference, checking every pull.
void expect_matches_reference(PsClient& client, const TableConfig& config, int steps,
                              std::size_t ids_per_step, std::int64_t range) {
  client.create_table(config);
  auto reference = testing::reference_store(config);
  const int dim = static_cast<int>(config.spec.dim);
  for (int step = 0; step < steps; ++step) {
    const auto ids = testing::random_ids(ids_per_step, range, 100 + step);
    std::vector<float> rows(ids.size() * dim, -1.0f);
    client.wait(client.pull(config.spec.name, ids, rows.data(), step));
    std::vector<float> expected(ids.size() * dim);
    reference->pull(ids, expected.data());
    ASSERT_EQ(rows, expected) << config.optimizer.type << " step " << step;

    const auto grads = testing::random_grads(ids.size(), dim, 200 + step);
    client.wait(client.push(config.spec.name, ids, grads.data(), 0.05, step));
    std::vector<std::int64_t> unique;
    std::vector<float> summed;
    testing::aggregate(ids, grads, dim, unique, summed);
    reference->push(unique, summed.data(), 0.05);
  }
  expect_same_rows(client, config.spec.name, *reference);  // the final state
}

class PsOptimizers : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PsOptimizers, PullPushEqualSingleProcessReference) {
  const auto& [optimizer, shards] = GetParam();
  Cluster cluster(shards);
  auto client = cluster.client();
  expect_matches_reference(*client, table_config("t_" + optimizer, 8, optimizer), 6, 3000, 2000);
}

INSTANTIATE_TEST_SUITE_P(AllSparseOptimizers, PsOptimizers,
                         ::testing::Combine(::testing::Values("sgd", "adagrad", "adam", "ftrl"),
                                            ::testing::Values(1, 2, 3)));

TEST(PsClientServer, ChunkedRequestsEqualReference) {
  Cluster cluster(2);
  ClientOptions options;
  options.chunk_bytes = 100;  // 3 rows of dim 8 per request: hundreds of chunks per shard
  auto client = cluster.client(0, options);
  expect_matches_reference(*client, table_config("chunked", 8, "adam"), 3, 2000, 1500);
  // Sync and bounded pushes are never chunked (one push per worker, shard and step).
  expect_matches_reference(*client, table_config("chunked_sync", 8, "adagrad", "sync"), 3, 2000, 1500);
  expect_matches_reference(*client, table_config("chunked_bounded", 8, "sgd", "bounded"), 3, 2000, 1500);
}

TEST(PsClientServer, IdsThatAllHashToOneShard) {
  Cluster cluster(3);
  auto client = cluster.client();
  const TableConfig config = table_config("one_shard", 4, "adagrad");
  client->create_table(config);
  auto reference = testing::reference_store(config);
  std::vector<std::int64_t> ids;
  for (std::int64_t id = 0; ids.size() < 500; ++id) {
    if (shard_of(id, 3) == 1) ids.push_back(id);
  }
  const auto grads = testing::random_grads(ids.size(), 4, 1);
  client->wait(client->push("one_shard", ids, grads.data(), 0.1, 0));
  reference->push(ids, grads.data(), 0.1);
  std::vector<float> rows(ids.size() * 4);
  std::vector<float> expected(ids.size() * 4);
  client->wait(client->pull("one_shard", ids, rows.data(), 1));
  reference->pull(ids, expected.data());
  EXPECT_EQ(rows, expected);
  const auto stats = client->stats();
  EXPECT_EQ(stats[0][0].rows, 0);
  EXPECT_EQ(stats[1][0].rows, 500);
  EXPECT_EQ(stats[2][0].rows, 0);
}

TEST(PsClientServer, EmptyRequests) {
  Cluster cluster(2);
  auto client = cluster.client();
  for (const char* mode : {"async", "sync", "bounded"}) {
    const std::string name = std::string("empty_") + mode;
    client->create_table(table_config(name, 4, "sgd", mode));
    const std::vector<std::int64_t> none;
    for (std::uint64_t step = 0; step < 3; ++step) {
      client->wait(client->pull(name, none, nullptr, step));
      client->wait(client->push(name, none, nullptr, 0.1, step));
    }
  }
  for (const auto& shard : client->stats()) {
    for (const auto& t : shard) EXPECT_EQ(t.rows, 0) << t.name;
  }
}

TEST(PsClientServer, VeryLargeRequests) {
  Cluster cluster(2);
  auto client = cluster.client();
  const TableConfig config = table_config("large", 16, "sgd");
  client->create_table(config);
  auto reference = testing::reference_store(config);
  // 600k unique ids of 16 floats: 38 MB of rows per pull, ~19 MB per shard frame.
  std::vector<std::int64_t> ids(600000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(mix64(i));
  std::vector<float> rows(ids.size() * 16);
  client->wait(client->pull("large", ids, rows.data(), 0));
  std::vector<float> expected(rows.size());
  reference->pull(ids, expected.data());
  EXPECT_EQ(rows, expected);
  const auto grads = testing::random_grads(ids.size(), 16, 5);
  client->wait(client->push("large", ids, grads.data(), 0.1, 0));
  reference->push(ids, grads.data(), 0.1);
  client->wait(client->pull("large", ids, rows.data(), 1));
  reference->pull(ids, expected.data());
  EXPECT_EQ(rows, expected);
}

TEST(PsClientServer, DuplicateIdsInOneRequestArePulledOnceAndAggregated) {
  Cluster cluster(2);
  auto client = cluster.client();
  const TableConfig config = table_config("dups", 3, "adam");
  // 5000 positions over 50 ids: heavy duplication.
  expect_matches_reference(*client, config, 4, 5000, 50);
  const auto stats = client->stats();
  std::int64_t pulled = 0;
  for (const auto& shard : stats) pulled += shard[0].pulled_rows;
  EXPECT_LE(pulled, 4 * 50 + 50);  // unique ids only (plus the final dump's none)
}

// RequestIds::unique skips the client's de-duplication: with unique ids the rows and optimiser
// state equal the reference bit for bit, and a pull that repeats an id anyway still fills
// every position with its row.
TEST(PsClientServer, RequestsDeclaredUniqueEqualReference) {
  Cluster cluster(2);
  auto client = cluster.client();
  const TableConfig config = table_config("declared", 5, "adagrad");
  client->create_table(config);
  auto reference = testing::reference_store(config);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::int64_t> ids;
    std::vector<float> unused;
    testing::aggregate(testing::random_ids(3000, 5000, 300 + step), std::vector<float>(3000 * 5), 5, ids, unused);
    std::vector<float> rows(ids.size() * 5, -1.0f), expected(ids.size() * 5);
    client->wait(client->pull(config.spec.name, ids, rows.data(), step, RequestIds::unique));
    reference->pull(ids, expected.data());
    ASSERT_EQ(rows, expected) << "step " << step;
    const auto grads = testing::random_grads(ids.size(), 5, 400 + step);
    client->wait(client->push(config.spec.name, ids, grads.data(), 0.05, step, RequestIds::unique));
    reference->push(ids, grads.data(), 0.05);
  }
  expect_same_rows(*client, config.spec.name, *reference);
  const std::vector<std::int64_t> repeated = {7, 11, 7, 7, 11};
  std::vector<float> rows(repeated.size() * 5, -1.0f), expected(repeated.size() * 5);
  client->wait(client->pull(config.spec.name, repeated, rows.data(), 4, RequestIds::unique));
  reference->pull(repeated, expected.data());
  EXPECT_EQ(rows, expected);
}

// Control requests (create_table, stats) take seqs from the same counter as pulls and pushes:
// the shard's retry log must fold them in, or every later request stays tracked above them.
TEST(PsClientServer, TheRetryLogStaysSmallAfterControlRequests) {
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(table_config("log", 4, "sgd"));
  const auto ids = testing::random_ids(10, 100, 1);
  std::vector<float> rows(ids.size() * 4);
  const std::vector<float> grads(rows.size(), 0.1f);
  for (int i = 0; i < 200; ++i) {
    client->wait(client->pull("log", ids, rows.data(), 0));
    client->wait(client->push("log", ids, grads.data(), 0.1, 0));
    if (i % 50 == 0) client->stats();
    // An evaluation's read-only pull (its sequence number used to stay a gap in the log).
    if (i % 50 == 1) client->wait(client->pull("log", ids, rows.data(), 0, RequestIds::may_repeat, true));
  }
  EXPECT_LE(cluster.servers[0]->tracked_requests(), 2u);
}

TEST(PsClientServer, DuplicatedPushIsAppliedOnce) {
  Cluster cluster(2);
  ClientOptions options;
  options.duplicate_pushes_for_testing = true;
  auto client = cluster.client(0, options);
  expect_matches_reference(*client, table_config("twice", 4, "adagrad"), 5, 400, 300);
  std::int64_t duplicates = 0;
  for (const auto& shard : client->stats()) duplicates += shard[0].duplicate_pushes;
  EXPECT_EQ(duplicates, 5 * 2);  // every push arrived twice on each of the 2 shards
}

TEST(PsClientServer, RetriedPushAfterLostReplyIsAppliedOnce) {
  ServerOptions server;
  server.drop_push_replies_for_testing = 3;  // per shard: the first 3 push replies vanish
  Cluster cluster(2, server);
  ClientOptions options;
  options.retry_interval_s = 0.2;
  auto client = cluster.client(0, options);
  expect_matches_reference(*client, table_config("retry", 4, "ftrl"), 5, 400, 300);
  std::int64_t duplicates = 0;
  for (const auto& shard : client->stats()) duplicates += shard[0].duplicate_pushes;
  EXPECT_GE(duplicates, 6);
}

TEST(PsClientServer, ConflictingTableConfigIsRejectedNamingTheTable) {
  Cluster cluster(1);
  auto client = cluster.client();
  client->create_table(table_config("conflict", 4, "sgd"));
  client->create_table(table_config("conflict", 4, "sgd"));  // same: fine
  try {
    client->create_table(table_config("conflict", 8, "sgd"));
    FAIL() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("conflict"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ps shard 0"), std::string::npos) << e.what();
  }
}

TEST(PsClientServer, UnknownTableIsAConfigError) {
  Cluster cluster(1);
  auto client = cluster.client();
  std::vector<std::int64_t> ids{1};
  float row[4];
  EXPECT_THROW(client->pull("nope", ids, row, 0), ConfigError);
}

TEST(PsClientServer, MissingShardTimesOutNamingIt) {
  ClientOptions options;
  options.endpoints = {"tcp://127.0.0.1:1"};  // nothing listens there
  options.timeout_s = 0.5;
  options.retry_interval_s = 0.2;
  PsClient client(options);
  try {
    client.create_table(table_config("t", 4, "sgd"));
    FAIL() << "expected a TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ps shard 0 (tcp://127.0.0.1:1)"), std::string::npos) << message;
    EXPECT_NE(message.find("create_table"), std::string::npos) << message;
  }
}

TEST(PsClientServer, PrefetchedRowsAreThoseOfABlockingPull) {
  Cluster cluster(2);
  auto client = cluster.client();
  const TableConfig config = table_config("prefetch", 4, "adagrad");
  auto store = std::make_shared<RemoteEmbeddingStore>(client, config);
  auto reference = testing::reference_store(config);
  for (int step = 0; step < 4; ++step) {
    const auto ids = testing::random_ids(200, 500, step);
    if (step % 2 == 1) store->prefetch(ids);  // taken by the pull below
    std::vector<float> rows(ids.size() * 4);
    std::vector<float> expected(rows.size());
    store->pull(ids, rows.data());
    reference->pull(ids, expected.data());
    ASSERT_EQ(rows, expected) << "step " << step;
    store->prefetch(testing::random_ids(200, 500, 99));  // discarded by the push below
    std::vector<std::int64_t> unique;
    std::vector<float> summed;
    testing::aggregate(ids, testing::random_grads(ids.size(), 4, step), 4, unique, summed);
    store->push(unique, summed.data(), 0.1);
    reference->push(unique, summed.data(), 0.1);
  }
  // The discarded prefetches still created their rows on the shards (a pull creates rows).
  const auto discarded = testing::random_ids(200, 500, 99);
  std::vector<float> scratch(discarded.size() * 4);
  reference->pull(discarded, scratch.data());
  EXPECT_EQ(store->num_rows(), reference->num_rows());
}

// A caller that goes away while its pull is in flight hands the row buffer to the client,
// which keeps it until the rows have arrived (here a pull held by bounded staleness 0 until
// the other worker pushes), and a store destroyed with such a prefetch hands over its own.
TEST(PsClientServer, ABufferHandedOverIsKeptUntilItsHeldPullIsAnswered) {
  Cluster cluster(1);
  TableConfig c = table_config("held", 4, "sgd", "bounded", 2);
  c.options.staleness = 0;
  TableConfig c_store = c;
  c_store.spec.name = "held_by_store";
  auto w0 = cluster.client(0);
  auto w1 = cluster.client(1);
  w0->create_table(c);
  w1->create_table(c);
  w1->create_table(c_store);
  const std::vector<std::int64_t> ids{1, 2, 3};
  const std::vector<float> grads(ids.size() * 4, 0.5f);
  w0->wait(w0->push("held", ids, grads.data(), 0.1, 0));

  struct Buffer {
    std::vector<float> rows;
    std::atomic<int>* state;  // 0 alive, 1 freed before its rows came, 2 freed with its rows
    ~Buffer() { state->store(!rows.empty() && rows[0] == -1.0f ? 1 : 2); }
  };
  std::atomic<int> state{0};
  auto buffer = std::make_shared<Buffer>(std::vector<float>(ids.size() * 4, -1.0f), &state);
  const Ticket held = w0->pull("held", ids, buffer->rows.data(), 1);  // step 1: waits for worker 1
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(w0->ready(held)) << "the pull was not held";
  w0->release_after(held, std::move(buffer));
  EXPECT_EQ(state.load(), 0) << "freed while its pull was still in flight";

  // The same through a store: destroyed with a held prefetch, it returns without waiting.
  auto store = std::make_unique<RemoteEmbeddingStore>(w0, c_store);
  store->push(ids, grads.data(), 0.1);  // step 0
  store->prefetch(ids);                 // step 1: held like the pull above
  const auto start = std::chrono::steady_clock::now();
  store.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // Worker 1's step 0 releases both held pulls.
  w1->wait(w1->push("held", ids, grads.data(), 0.1, 0));
  w1->wait(w1->push("held_by_store", ids, grads.data(), 0.1, 0));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (state.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(state.load(), 2) << "the buffer was not released after its rows arrived";
  // An invalid ticket releases at once.
  std::atomic<int> other{0};
  w0->release_after(Ticket(), std::make_shared<Buffer>(std::vector<float>(1, 0.0f), &other));
  EXPECT_EQ(other.load(), 2);
}

}  // namespace
}  // namespace aiacc::ps

namespace aiacc::ps {
namespace {

// Two shards, and a client (timeout 60 s, the given reconnect grace) that created table "t"
// (dim 4) and pulled ids 0..63 once.
struct TwoShardJob {
  testing::Cluster cluster{2};
  std::shared_ptr<PsClient> client;
  std::vector<std::int64_t> ids;
  std::vector<float> rows;

  static TableConfig table() { return testing::table_config("t", 4, "sgd"); }
  explicit TwoShardJob(double reconnect_grace_s) : ids(64), rows(64 * 4) {
    ClientOptions options;
    options.timeout_s = 60;
    options.reconnect_grace_s = reconnect_grace_s;
    client = cluster.client(0, options);
    client->create_table(table());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
    client->wait(client->pull("t", ids, rows.data(), 0));
  }
};

TEST(PsClientServer, ADeadShardFailsItsRequestsAfterTheReconnectGraceNotTheTimeout) {
  // Shard 1 goes away (its socket closes, as when its process dies); requests to it fail with
  // a CommError naming it soon after reconnect_grace_s, far before timeout_s; shard 0 still
  // answers.
  TwoShardJob job(1.0);
  auto& [cluster, client, ids, rows] = job;

  cluster.servers[1].reset();
  const auto start = std::chrono::steady_clock::now();
  try {
    // Within the grace the request waits (the shard could come back); then it fails.
    client->wait(client->pull("t", ids, rows.data(), 0));
    FAIL() << "a pull from a dead shard succeeded";
  } catch (const TimeoutError& e) {
    FAIL() << "timed out instead of reporting the lost connection: " << e.what();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("ps shard 1"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("connection to the shard was lost"));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 10.0);
  // Later requests to the dead shard fail at once; the live shard is unaffected.
  std::vector<std::int64_t> shard0_ids;
  for (std::int64_t id : ids) {
    if (shard_of(id, 2) == 0) shard0_ids.push_back(id);
  }
  ASSERT_FALSE(shard0_ids.empty());
  std::vector<float> shard0_rows(shard0_ids.size() * 4);
  EXPECT_NO_THROW(client->wait(client->pull("t", shard0_ids, shard0_rows.data(), 0)));
}

TEST(PsClientServer, AShardRestartedWithinTheGraceFailsTheRequestsInsteadOfServingFreshRows) {
  // Shard 1's process is replaced at the same endpoint within reconnect_grace_s and its table
  // is registered again (as a supervisor restarting it, resuming an older checkpoint, would):
  // its rows are fresh, so a pull would succeed with rows that lost their training. The
  // client sees the shard's new incarnation and fails, naming the shard and the restart.
  TwoShardJob job(30);
  auto& [cluster, client, ids, rows] = job;
  const std::vector<float> grads(ids.size() * 4, 1.0f);
  client->wait(client->push("t", ids, grads.data(), 0.5, 0));

  ServerOptions restarted;
  restarted.num_shards = 2;
  restarted.shard = 1;
  restarted.log_interval_s = 0;
  restarted.bind = cluster.servers[1]->endpoint();
  cluster.servers[1].reset();
  cluster.servers[1] = std::make_unique<PsServer>(restarted);
  ClientOptions options;
  options.timeout_s = 60;
  cluster.client(1, options)->create_table(TwoShardJob::table());

  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 0; attempt < 2; ++attempt) {  // the next request fails too
    try {
      client->wait(client->pull("t", ids, rows.data(), 1));
      FAIL() << "a pull from a restarted shard succeeded";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("ps shard 1"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("the shard was restarted during the job"));
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

TEST(PsClientServer, AShardOfAnotherProtocolVersionFailsTheRequestsAtOnceSayingSo) {
  // A stand-in shard that answers every request with a version-1 reply header (32 bytes): the
  // client must say "another aiacc-train version" at once, not drop the replies and wait for
  // timeout_s.
  auto context = net::Context::create(1);
  net::Socket router(context, ZMQ_ROUTER, 0);
  const std::string endpoint = router.bind("tcp://127.0.0.1:*");
  std::atomic<bool> stop{false};
  std::thread shard([&] {
    while (!stop) {
      if (!(router.poll(ZMQ_POLLIN, 20) & ZMQ_POLLIN)) continue;
      std::vector<std::string> frames;
      int more = 1;
      while (more) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, router.handle(), 0) < 0) return;
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
        more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
      }
      std::string old_header(32, '\0');
      const std::uint32_t magic = kMagic;
      const std::uint16_t version = 1;
      std::memcpy(old_header.data(), &magic, sizeof magic);
      std::memcpy(old_header.data() + 4, &version, sizeof version);
      zmq_send(router.handle(), frames[0].data(), frames[0].size(), ZMQ_SNDMORE);
      zmq_send(router.handle(), old_header.data(), old_header.size(), 0);
    }
  });
  ClientOptions options;
  options.endpoints = {endpoint};
  options.timeout_s = 60;
  const auto start = std::chrono::steady_clock::now();
  {
    PsClient client(options, context);
    try {
      client.create_table(testing::table_config("t", 4, "sgd"));
      ADD_FAILURE() << "a shard of another version was accepted";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "timed out instead of naming the version: " << e.what();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("ps shard 0"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("version 1 (expected"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("another aiacc-train version"));
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  stop = true;
  shard.join();
}

}  // namespace
}  // namespace aiacc::ps
