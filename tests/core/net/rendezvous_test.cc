// Rendezvous: ranks as threads register with a server in this process and find each other,
// for world sizes 1, 2, 3, 5, 8; the key-value API and barriers; and the job-breaking errors
// (missing rank -> TimeoutError listing it, duplicate rank, world-size disagreement, rank out
// of range -> CommError naming the ranks, for every rank). Also connect_mesh on top of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "core/net/mesh_bootstrap.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::net {
namespace {

using aiacc::testing::fast_options;
using aiacc::testing::run_ranks;
using ::testing::HasSubstr;
using ::testing::Not;

class RendezvousWorld : public ::testing::TestWithParam<int> {};

TEST_P(RendezvousWorld, EveryRankGetsEveryRanksAddresses) {
  const int world = GetParam();
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  run_ranks(world, [&](int rank) {
    RendezvousClient client(Context::create(), "127.0.0.1:" + std::to_string(server.port()));
    const auto deadline = deadline_after(10);
    client.register_rank(rank, world, {"addr-" + std::to_string(rank), "second"}, deadline);
    const AddressTable table = client.wait_all(deadline);
    ASSERT_EQ(static_cast<int>(table.size()), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(table[r], (std::vector<std::string>{"addr-" + std::to_string(r), "second"}));
    }
    client.barrier("done", deadline);
  });
  server.check();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, RendezvousWorld, ::testing::Values(1, 2, 3, 5, 8));

TEST(Rendezvous, KeyValueGetBlocksUntilSet) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  run_ranks(3, [&](int rank) {
    RendezvousClient client(Context::create(), server.endpoint());
    const auto deadline = deadline_after(10);
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // others wait first
      const std::byte binary[] = {std::byte{0}, std::byte{255}, std::byte{7}};
      client.set("binary", binary, deadline);
      client.set_string("config-hash", "abc123", deadline);
    }
    EXPECT_EQ(client.get_string("config-hash", deadline), "abc123");
    const auto value = client.get("binary", deadline);
    ASSERT_EQ(value.size(), 3u);
    EXPECT_EQ(value[1], std::byte{255});
  });
}

// A timeout of 1e12 s means "practically forever": it must not wrap the clock's nanoseconds
// into a deadline in the past (it failed at once with "timed out after 0.00 s").
TEST(Rendezvous, AHugeTimeoutWaitsInsteadOfExpiringAtOnce) {
  EXPECT_GT(deadline_after(1e12), Clock::now() + std::chrono::hours(24 * 365 * 30));
  for (const double expired : {-1.0, 0.0, std::nan("")}) {
    const Deadline deadline = deadline_after(expired);
    EXPECT_LE(deadline, Clock::now()) << expired;
  }
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  run_ranks(2, [&](int rank) {
    RendezvousClient client(Context::create(), server.endpoint());
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the other waits first
      client.set_string("late", "value", deadline_after(10));
    }
    EXPECT_EQ(client.get_string("late", deadline_after(1e12)), "value");
  });
}

TEST(Rendezvous, GetOfAKeyNeverSetTimesOutNamingIt) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  RendezvousClient client(Context::create(), server.endpoint());
  const auto start = Clock::now();
  try {
    client.get_string("plan-hash", deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_LT(seconds_since(start), 1.3);
    EXPECT_THAT(e.what(), HasSubstr("'plan-hash'"));
  }
}

// A host name that does not resolve is said so at the timeout: a typo in MASTER_ADDR looked
// exactly like a rank 0 that never came. (.invalid never resolves: RFC 6761.)
TEST(Rendezvous, AServerNameThatDoesNotResolveIsNamedAtTheTimeout) {
  RendezvousClient client(Context::create(), "nohost.invalid:29500");
  try {
    client.get_string("plan-hash", deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the host 'nohost.invalid' does not resolve"));
  }
  RendezvousClient numeric(Context::create(), "127.0.0.1:1");
  try {
    numeric.get_string("plan-hash", deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), Not(HasSubstr("does not resolve")));
  }
}

// Names are judged by the address a connection to them reaches (rank 0 serves a loopback
// MASTER_ADDR there): the first IPv4 address they resolve to.
TEST(Rendezvous, ResolvesNamesToTheIpv4AddressAConnectionReaches) {
  EXPECT_EQ(resolve_ipv4("localhost").address, "127.0.0.1");
  EXPECT_EQ(resolve_ipv4("127.0.1.1").address, "127.0.1.1");
  const Ipv4Resolution missing = resolve_ipv4("nohost.invalid");
  EXPECT_EQ(missing.address, "");
  EXPECT_NE(missing.error, "");
  EXPECT_TRUE(is_loopback_ipv4("127.0.1.1"));
  EXPECT_TRUE(is_loopback_ipv4("127.255.255.254"));
  EXPECT_FALSE(is_loopback_ipv4("10.0.0.127"));
  EXPECT_FALSE(is_loopback_ipv4("128.0.0.1"));
  EXPECT_FALSE(is_loopback_ipv4(""));
  EXPECT_FALSE(is_loopback_ipv4("localhost"));  // a name, not an address: resolve it first
}

// lookup_string looks once: nothing before the key is set (no waiting), the value after.
TEST(Rendezvous, LookupOfAKeyDoesNotWaitForIt) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  RendezvousClient client(Context::create(), server.endpoint());
  const auto start = Clock::now();
  EXPECT_EQ(client.lookup_string("stop/signal", deadline_after(10)), std::nullopt);
  EXPECT_LT(seconds_since(start), 1.0);
  client.set_string("stop/signal", "15", deadline_after(10));
  EXPECT_EQ(client.lookup_string("stop/signal", deadline_after(10)), std::optional<std::string>("15"));
}

TEST(Rendezvous, BarrierReleasesNoRankBeforeTheLastArrives) {
  const int world = 4;
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  std::atomic<int> arrived{0};
  run_ranks(world, [&](int rank) {
    RendezvousClient client(Context::create(), server.endpoint());
    const auto deadline = deadline_after(10);
    client.register_rank(rank, world, {}, deadline);
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * rank));
      ++arrived;
      client.barrier("round-" + std::to_string(round), deadline);
      EXPECT_GE(arrived.load(), world * (round + 1));
    }
  });
}

// A rank that fails tells the store (RendezvousClient::abort): the ranks waiting there stop at
// once, naming it, with an error of its kind; the first abort wins; the store knows when every
// rank has been told (rank 0 keeps it up until then).
TEST(Rendezvous, AnAbortEndsEveryWaitAtOnceNamingTheRankAndKeepingItsKind) {
  for (const bool config_error : {true, false}) {
    RendezvousServer server(Context::create(), "127.0.0.1", 0);
    std::atomic<int> told{0};
    run_ranks(3, [&](int rank) {
      RendezvousClient client(Context::create(), server.endpoint());
      client.register_rank(rank, 3, {}, deadline_after(10));
      client.wait_all(deadline_after(10));
      if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others wait first
        client.abort("cannot access d/train.tsv", config_error, deadline_after(5));
        EXPECT_TRUE(server.wait_abort_delivered(deadline_after(10)));
        return;
      }
      const auto start = Clock::now();
      try {
        client.get_string("data-size/1", deadline_after(30));
        ADD_FAILURE() << "rank " << rank << ": the get succeeded";
      } catch (const ConfigError& e) {
        EXPECT_TRUE(config_error) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("rank 1 failed: cannot access d/train.tsv"));
        ++told;
      } catch (const CommError& e) {
        EXPECT_FALSE(config_error) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("rank 1 failed: cannot access d/train.tsv"));
        ++told;
      }
      EXPECT_LT(seconds_since(start), 5.0);
      // A second abort changes nothing: the first rank's failure is the job's, of its kind.
      client.abort("a later failure", !config_error, deadline_after(5));
      try {
        client.barrier("after", deadline_after(1));
        ADD_FAILURE() << "the barrier passed";
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("rank 1 failed: cannot access d/train.tsv"));
        EXPECT_EQ(dynamic_cast<const ConfigError*>(&e) != nullptr, config_error) << e.what();
      }
    });
    EXPECT_EQ(told.load(), 2);
  }
}

// The failed rank 0 keeps its store up until the ranks that were waiting at it have been told;
// a rank busy elsewhere (no request for longer than the polling interval) does not hold it up.
TEST(Rendezvous, AnAbortIsDeliveredOnceTheRanksWaitingAtTheStoreWereTold) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  RendezvousClient failing(Context::create(), server.endpoint());
  RendezvousClient waiting(Context::create(), server.endpoint());
  RendezvousClient busy(Context::create(), server.endpoint());
  failing.register_rank(0, 3, {}, deadline_after(10));
  busy.register_rank(2, 3, {}, deadline_after(10));
  waiting.register_rank(1, 3, {}, deadline_after(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // longer than the polling window
  EXPECT_FALSE(server.wait_abort_delivered(deadline_after(0.05)));  // no abort yet
  const std::byte value[] = {std::byte{1}};
  waiting.set("progress", value, deadline_after(5));  // rank 1 is at the store
  failing.abort("out of memory", false, deadline_after(5));
  EXPECT_FALSE(server.wait_abort_delivered(deadline_after(0.2)));  // rank 1 has not asked since
  try {
    waiting.get_string("anything", deadline_after(5));
    FAIL() << "expected the abort";
  } catch (const TimeoutError& e) {
    FAIL() << e.what();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 failed: out of memory"));
  }
  // Rank 2, idle since it registered, is not waited for.
  EXPECT_TRUE(server.wait_abort_delivered(deadline_after(5)));
}

TEST(Rendezvous, MissingRankIsATimeoutListingIt) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  std::atomic<int> timeouts{0};
  run_ranks(4, [&](int rank) {
    if (rank == 1 || rank == 3) return;  // never arrive
    RendezvousClient client(Context::create(), server.endpoint());
    client.register_rank(rank, 4, {}, deadline_after(5));
    const auto start = Clock::now();
    try {
      client.wait_all(deadline_after(0.4));
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      EXPECT_LT(seconds_since(start), 1.4);
      EXPECT_THAT(e.what(), HasSubstr("missing ranks: 1, 3"));
      ++timeouts;
    }
  });
  EXPECT_EQ(timeouts, 2);
}

TEST(Rendezvous, MissingRankInBarrierIsListed) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  RendezvousClient client(Context::create(), server.endpoint());
  client.register_rank(0, 2, {}, deadline_after(5));
  try {
    client.barrier("start", deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("barrier 'start'"));
    EXPECT_THAT(e.what(), HasSubstr("missing ranks: 1"));
  }
}

// Registers `ranks` (rank, world) pairs from distinct clients, the last one breaking the job;
// every rank must then fail with a CommError (not a timeout) whose message has `expected`.
void expect_job_broken(const std::vector<std::pair<int, int>>& ranks, const std::string& expected) {
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    clients.push_back(std::make_unique<RendezvousClient>(Context::create(), server.endpoint()));
  }
  // The breaking registration itself fails...
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const bool breaks = i + 1 == ranks.size();
    try {
      clients[i]->register_rank(ranks[i].first, ranks[i].second, {}, deadline_after(5));
      EXPECT_FALSE(breaks) << "registration should have failed";
    } catch (const CommError& e) {
      EXPECT_TRUE(breaks) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  }
  // ...and every rank learns of it on its next request, fast, with the same message.
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    try {
      clients[i]->wait_all(deadline_after(5));
      ADD_FAILURE() << "expected CommError";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "timeout instead of CommError: " << e.what();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  }
}

TEST(Rendezvous, DuplicateRankIsACommError) {
  expect_job_broken({{0, 3}, {1, 3}, {1, 3}}, "duplicate rank 1");
}

TEST(Rendezvous, WorldSizeDisagreementNamesBothRanks) {
  expect_job_broken({{0, 2}, {1, 3}}, "rank 1 says 3, but rank 0 said 2");
}

TEST(Rendezvous, RankOutOfRangeIsACommError) {
  expect_job_broken({{0, 4}, {5, 4}}, "rank 5 is out of range for world size 4");
}

TEST(Rendezvous, NoServerIsATimeoutNamingIt) {
  // A port nothing listens on: bind one and close it.
  int port = 0;
  {
    RendezvousServer probe(Context::create(), "127.0.0.1", 0);
    port = probe.port();
  }
  RendezvousClient client(Context::create(), "127.0.0.1:" + std::to_string(port));
  try {
    client.register_rank(0, 1, {}, deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rendezvous server tcp://127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("register rank 0 of 1"));
  }
}

TEST(Rendezvous, ConnectMeshThroughTheStore) {
  const int world = 3;
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  run_ranks(world, [&](int rank) {
    auto context = Context::create();
    RendezvousClient client(context, server.endpoint());
    const auto deadline = deadline_after(10);
    client.register_rank(rank, world, {}, deadline);
    MeshSpec spec;
    spec.rank = rank;
    spec.world_size = world;
    spec.streams = 2;
    spec.channel = fast_options();
    Mesh mesh = connect_mesh(context, client, spec, "ring", deadline);
    for (int peer : mesh.peers()) {
      const int value = rank;
      mesh.channel(peer, 1).send(std::as_bytes(std::span(&value, 1)), deadline, "hello");
    }
    for (int peer : mesh.peers()) {
      Message message = mesh.channel(peer, 1).recv(deadline, "hello");
      int value = -1;
      std::memcpy(&value, message.bytes().data(), sizeof value);
      EXPECT_EQ(value, peer);
    }
    client.barrier("mesh-done", deadline);
  });
}

}  // namespace
}  // namespace aiacc::net
