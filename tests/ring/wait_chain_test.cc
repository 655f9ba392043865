// The wait chain (ring/wait_chain.h): ranks that timed out report whom they waited for at a
// rendezvous store in this process (ranks as threads), and each follows the reports from its
// own peer to the rank that holds everyone up. The finding's wording is checked on the pure
// function (a silent rank at the chain's end, directly or through others; a cycle; a rank that
// cannot tell whom it waited for), the exchange on a live store: a rank that never reports is
// named after the window, a cycle ends the exchange at once, and a store that is gone or a
// failure reported there meanwhile bound it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "ring/wait_chain.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::ring {
namespace {

using aiacc::testing::run_ranks;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<net::RendezvousClient> joined(const std::string& endpoint, int rank, int world) {
  auto client = std::make_unique<net::RendezvousClient>(net::Context::create(), endpoint);
  const auto deadline = net::deadline_after(10);
  client->register_rank(rank, world, {}, deadline);
  client->wait_all(deadline);
  return client;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(WaitChain, NamesTheRankAtTheEndOfTheChainThatReportedNothing) {
  // Rank 1 is stopped; rank 2 waits for it, rank 0 for rank 2 (a ring's direction).
  const std::map<int, WaitReport> reports{{0, {2, "all-reducing gradients"}}, {2, {1, "all-reducing gradients"}}};
  EXPECT_EQ(describe_wait_chain(0, reports, 3.0),
            "wait chain: rank 2 was itself waiting for rank 1 (all-reducing gradients), which reported nothing "
            "within 3.0 s: rank 1 is likely the cause, stopped or stuck (its process alive but silent) or cut off "
            "from the network");
  EXPECT_THAT(describe_wait_chain(2, reports, 3.0),
              HasSubstr("wait chain: rank 1, which this rank waited for, reported nothing within 3.0 s: rank 1 is "
                        "likely the cause"));
  EXPECT_FALSE(wait_chain_complete(0, reports));
  // Longer chains name every link.
  const std::map<int, WaitReport> longer{{0, {3, "a"}}, {3, {2, "b"}}, {2, {1, "c"}}};
  EXPECT_THAT(describe_wait_chain(0, longer, 1.0),
              HasSubstr("rank 3 was itself waiting for rank 2 (b), rank 2 for rank 1 (c), which reported nothing"));
}

TEST(WaitChain, ACycleSaysEveryRankInItIsAlive) {
  const std::map<int, WaitReport> reports{{0, {1, "x"}}, {1, {2, "y"}}, {2, {0, "z"}}};
  EXPECT_TRUE(wait_chain_complete(0, reports));
  EXPECT_THAT(describe_wait_chain(0, reports, 0.1),
              HasSubstr("rank 1 was itself waiting for rank 2 (y), rank 2 for rank 0 (z): ranks 0, 1, 2 wait for "
                        "each other, so all of them are alive"));
  // A cycle this rank is not part of.
  const std::map<int, WaitReport> beside{{0, {1, "x"}}, {1, {2, "y"}}, {2, {1, "z"}}};
  EXPECT_TRUE(wait_chain_complete(0, beside));
  EXPECT_THAT(describe_wait_chain(0, beside, 0.1), HasSubstr("ranks 1, 2 wait for each other"));
}

TEST(WaitChain, ARankThatCannotTellWhomItWaitedForEndsTheChain) {
  const std::map<int, WaitReport> reports{{0, {1, "x"}}, {1, {-1, "pulling rows"}}};
  EXPECT_TRUE(wait_chain_complete(0, reports));
  EXPECT_EQ(describe_wait_chain(0, reports, 0.1),
            "wait chain: rank 1, which this rank waited for, timed out too (pulling rows) and cannot tell whom it "
            "waited for");
  // Nothing to follow from a rank whose own peer is unknown.
  EXPECT_EQ(describe_wait_chain(1, reports, 0.1), "");
}

TEST(WaitChain, TheExchangeNamesTheSilentRankAfterTheWindow) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  std::vector<std::string> found(4);
  std::vector<double> took(4);
  run_ranks(4, [&](int rank) {
    auto client = joined(server.endpoint(), rank, 4);
    if (rank == 1 || rank == 3) return;  // 1: stopped; 3: a shard, never asked
    // Rank 2 times out a little after rank 0, as ranks of one collective do.
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto start = std::chrono::steady_clock::now();
    found[static_cast<std::size_t>(rank)] =
        exchange_wait_chain(*client, rank, {rank == 0 ? 2 : 1, "all-reducing gradients"}, 1.0);
    took[static_cast<std::size_t>(rank)] = seconds_since(start);
  });
  EXPECT_THAT(found[0], HasSubstr("wait chain: rank 2 was itself waiting for rank 1 (all-reducing gradients), which "
                                  "reported nothing within 1."));
  EXPECT_THAT(found[2], HasSubstr("wait chain: rank 1, which this rank waited for, reported nothing"));
  for (int rank : {0, 2}) {
    EXPECT_GE(took[static_cast<std::size_t>(rank)], 0.9) << found[static_cast<std::size_t>(rank)];
    EXPECT_LT(took[static_cast<std::size_t>(rank)], 5.0) << found[static_cast<std::size_t>(rank)];
  }
}

TEST(WaitChain, ACycleEndsTheExchangeBeforeTheWindow) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(2, [&](int rank) {
    auto client = joined(server.endpoint(), rank, 2);
    const auto start = std::chrono::steady_clock::now();
    const std::string found = exchange_wait_chain(*client, rank, {1 - rank, "barrier"}, 20.0);
    EXPECT_THAT(found, HasSubstr("ranks 0, 1 wait for each other"));
    EXPECT_LT(seconds_since(start), 5.0);
  });
}

TEST(WaitChain, AnUnknownPeerIsPublishedWithoutWaiting) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  auto client = joined(server.endpoint(), 0, 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(exchange_wait_chain(*client, 0, {-1, "pulling rows"}, 20.0), "");
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(client->lookup_string("wait-chain/0", net::deadline_after(5)), "-1\npulling rows");
}

TEST(WaitChain, AStoreThatIsGoneBoundsTheExchangeAndIsNamed) {
  auto server = std::make_unique<net::RendezvousServer>(net::Context::create(), "127.0.0.1", 0);
  net::RendezvousClient rank0(net::Context::create(), server->endpoint());
  rank0.register_rank(0, 2, {}, net::deadline_after(10));
  auto client = joined(server->endpoint(), 1, 2);
  server.reset();
  const auto start = std::chrono::steady_clock::now();
  const std::string found = exchange_wait_chain(*client, 1, {0, "all-reducing gradients"}, 0.5);
  EXPECT_THAT(found, HasSubstr("wait chain: the rendezvous store did not answer within 0.5 s"));
  EXPECT_THAT(found, Not(HasSubstr("reported nothing")));
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(WaitChain, AFailureReportedMeanwhileCutsTheExchangeShort) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(3, [&](int rank) {
    auto client = joined(server.endpoint(), rank, 3);
    if (rank == 1) {
      // Once rank 0 has published its report it is waiting for rank 2's.
      client->get_string("wait-chain/0", net::deadline_after(20));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      client->abort("out of memory", false, net::deadline_after(5));
      return;
    }
    if (rank == 2) return;
    const auto start = std::chrono::steady_clock::now();
    const std::string found = exchange_wait_chain(*client, 0, {2, "all-reducing gradients"}, 20.0);
    // Rank 2 had no time to report: it is not blamed.
    EXPECT_THAT(found, HasSubstr("wait chain: another rank's failure was reported at the store after "));
    EXPECT_THAT(found, HasSubstr("before rank 2 had reported"));
    EXPECT_THAT(found, Not(HasSubstr("likely the cause")));
    EXPECT_LT(seconds_since(start), 5.0);
  });
}

// What was heard before another rank's failure stands: rank 0 learnt that rank 2 waits for
// rank 3, whose report the failure then kept from it.
TEST(WaitChain, ACutShortExchangeKeepsTheLinksHeard) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(4, [&](int rank) {
    auto client = joined(server.endpoint(), rank, 4);
    if (rank == 2) {
      client->set_string("wait-chain/2", "3\nall-reducing gradients", net::deadline_after(5));
      return;
    }
    if (rank == 1) {
      // After both reports are in, and rank 0's polls (every 50 ms) have had time to read rank 2's.
      client->get_string("wait-chain/2", net::deadline_after(20));
      client->get_string("wait-chain/0", net::deadline_after(20));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      client->abort("out of memory", false, net::deadline_after(5));
      return;
    }
    if (rank == 3) return;
    const std::string found = exchange_wait_chain(*client, 0, {2, "all-reducing gradients"}, 20.0);
    EXPECT_THAT(found, HasSubstr("wait chain: rank 2 was itself waiting for rank 3 (all-reducing gradients); "
                                 "another rank's failure was reported at the store after "));
    EXPECT_THAT(found, HasSubstr("before rank 3 had reported"));
  });
}

}  // namespace
}  // namespace aiacc::ring
