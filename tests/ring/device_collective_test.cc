// The stall check of device collectives (ring/device_collective.h): ranks as threads meet at a
// rendezvous server in this process, each with a collective scripted to fail as NCCL does
// (TimeoutError "not complete", CommError "remote process exited"). The survivors' errors must
// keep their type and message and add what the check found: the rank that never came (a
// stopped or dead peer), that every rank came (all alive), or that the store did not answer;
// only the first failure is checked; make_device_collective adds the check only where it can
// meet the others.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "ring/device_collective.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::ring {
namespace {

using aiacc::testing::run_ranks;
using ::testing::HasSubstr;
using ::testing::Not;

enum class Failure { none, timeout, comm };

// Fails every waiting call the way it is told; counts the calls that reached it.
class ScriptedCollective : public DeviceCollective {
 public:
  ScriptedCollective(int rank, Failure failure) : rank_(rank), failure_(failure) {}
  void allreduce(float*, std::int64_t, ReduceOp) override { fail("allreduce"); }
  void wait_for_compute() override { fail("wait_for_compute"); }
  void synchronize() override { fail("synchronize"); }
  double take_busy_seconds() override { return 0.0; }
  std::string describe() const override { return "scripted"; }

 private:
  void fail(const char* op) {
    const std::string where = "rank " + std::to_string(rank_) + " " + op;
    if (failure_ == Failure::timeout) throw TimeoutError(where + ": not complete after 5.00 s");
    if (failure_ == Failure::comm) throw CommError(where + ": remote process exited");
  }
  int rank_;
  Failure failure_;
};

// Registers `rank` of `world` with the server and waits for every rank.
std::unique_ptr<net::RendezvousClient> joined(const net::RendezvousServer& server, int rank, int world) {
  auto client = std::make_unique<net::RendezvousClient>(net::Context::create(), server.endpoint());
  const auto deadline = net::deadline_after(10);
  client->register_rank(rank, world, {}, deadline);
  client->wait_all(deadline);
  return client;
}

// Ranks 0-2 are the collective's (workers); rank 3 is a parameter-server shard of the job,
// which never comes to the check and must not be named.
TEST(StallCheck, TheSurvivorsOfASilentPeerNameItAndKeepTheirErrorsType) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  std::atomic<int> named{0};
  run_ranks(4, [&](int rank) {
    auto client = joined(server, rank, 4);
    if (rank >= 2) return;  // rank 2: the stopped peer, never comes to the check; rank 3: a shard
    auto collective = with_stall_check(std::make_unique<ScriptedCollective>(rank, Failure::timeout), *client,
                                       "dense", 3, 0.5);
    try {
      collective->synchronize();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const TimeoutError& e) {
      const std::string message = e.what();
      EXPECT_THAT(message, HasSubstr("rank " + std::to_string(rank) + " synchronize: not complete after 5.00 s"));
      EXPECT_THAT(message, HasSubstr("stall check: rank 2 did not come to the rendezvous store within 0.5 s"));
      ++named;
    }
  });
  EXPECT_EQ(named.load(), 2);
}

TEST(StallCheck, WhenEveryRankComesAllAreAliveAndTheErrorSaysSo) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(4, [&](int rank) {
    auto client = joined(server, rank, 4);
    if (rank == 3) return;  // a shard: not the collective's
    auto collective = with_stall_check(std::make_unique<ScriptedCollective>(rank, Failure::comm), *client,
                                       "dense", 3, 5.0);
    try {
      collective->wait_for_compute();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "a CommError became a TimeoutError: " << e.what();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("remote process exited; stall check: every rank came"));
    }
  });
}

TEST(StallCheck, AStoreThatDoesNotAnswerPointsAtRankZeroAndOnlyTheFirstFailureIsChecked) {
  auto server = std::make_unique<net::RendezvousServer>(net::Context::create(), "127.0.0.1", 0);
  net::RendezvousClient rank0(net::Context::create(), server->endpoint());
  rank0.register_rank(0, 2, {}, net::deadline_after(10));
  auto client = joined(*server, 1, 2);
  server.reset();  // rank 0 is gone, and its store with it
  auto collective = with_stall_check(std::make_unique<ScriptedCollective>(1, Failure::comm), *client, "dense", 2, 0.3);
  try {
    float x = 0;
    collective->allreduce(&x, 1, ReduceOp::kSum);
    ADD_FAILURE() << "no error";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("remote process exited; stall check: the rendezvous store did not answer, so "
                                    "its server (rank 0 under an outer launcher, else the local launcher) may be "
                                    "what is missing"));
  }
  try {
    collective->synchronize();
    ADD_FAILURE() << "no error";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "rank 1 synchronize: remote process exited");
  }
}

// Another rank's failure, reported to the store while the check waits, cuts it short and is
// named (not taken for a store that does not answer).
TEST(StallCheck, AFailureReportedMeanwhileCutsTheCheckShortAndIsNamed) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(3, [&](int rank) {
    auto client = joined(server, rank, 3);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are at the check
      client->abort("CUDA error: an illegal memory access", false, net::deadline_after(5));
      return;
    }
    auto collective = with_stall_check(std::make_unique<ScriptedCollective>(rank, Failure::timeout), *client,
                                       "dense", 3, 10.0);
    const auto start = std::chrono::steady_clock::now();
    try {
      collective->synchronize();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("stall check cut short: rendezvous: rank 2 failed: CUDA error"));
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  });
}

TEST(StallCheck, MakeDeviceCollectiveChecksOnlyWhereItCanMeetTheOthers) {
  register_device_collective(DeviceKind::cuda, [](const DeviceCollectiveSpec& spec) {
    return std::make_unique<ScriptedCollective>(spec.rank, Failure::timeout);
  });
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  run_ranks(2, [&](int rank) {
    auto client = joined(server, rank, 2);
    DeviceCollectiveSpec spec;
    spec.rendezvous = client.get();
    spec.rank = rank;
    spec.world_size = 2;
    spec.device = Device::cuda(0);
    spec.name = "dense";
    spec.timeout_s = 0.4;  // bounds the check's window (stall_check_s is 10)
    const auto message = [](DeviceCollective& c) {
      try {
        c.synchronize();
      } catch (const TimeoutError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const auto checked = make_device_collective(spec);
    if (rank == 0) {
      EXPECT_THAT(message(*checked), HasSubstr("stall check: every rank came"));
      spec.stall_check_s = 0;  // asked for no check
      EXPECT_EQ(message(*make_device_collective(spec)), "rank 0 synchronize: not complete after 5.00 s");
      spec.stall_check_s = 10;
      spec.rendezvous = nullptr;  // nothing to meet at
      EXPECT_THAT(message(*make_device_collective(spec)), Not(HasSubstr("stall check")));
    } else {
      EXPECT_THAT(message(*checked), HasSubstr("stall check: every rank came"));
    }
  });
}

}  // namespace
}  // namespace aiacc::ring
