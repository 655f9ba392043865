// ProcessGroup's start-up broadcasts and job barriers on a timeout: workers as threads of this
// process on loopback, each with its own ProcessGroup (worker 0 serves the rendezvous store).
// A worker that never comes to the collective is named through the wait chain
// (ring/wait_chain.h) even by a worker whose own wait was for a healthy neighbour, and a
// timeout explained there is not explained a second time by a caller that explains its own
// (the training loop).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "tests/testing/loopback_group.h"
#include "tests/testing/run_ranks.h"
#include "tools/trainer/process_group.h"

namespace aiacc::trainer {
namespace {

using aiacc::testing::free_port;
using aiacc::testing::loopback_cluster;
using aiacc::testing::loopback_role;
using aiacc::testing::run_ranks;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kRingTimeoutS = 1.5;

// Runs `world` workers: worker `frozen` joins the job, then stays away from the collective
// (as a stopped process would) until the others are done; every other worker runs
// `collective` and its timeout's message is returned, by worker ("" for the frozen one and
// for a worker that did not time out).
std::vector<std::string> timeouts_with_a_frozen_worker(int world, int frozen,
                                                       const std::function<void(ProcessGroup&)>& collective) {
  const int port = free_port();
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::latch others_done(world - 1);
  run_ranks(world, [&](int rank) {
    ProcessGroup group(loopback_cluster(world, kRingTimeoutS), loopback_role(rank, world, port));
    if (rank == frozen) {
      others_done.wait();
      return;
    }
    try {
      collective(group);
    } catch (const TimeoutError& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    } catch (...) {
      others_done.count_down();
      throw;
    }
    others_done.count_down();
  });
  return errors;
}

// Root 0 is frozen: worker 1 waits for it, worker 2 for worker 1 (the chain 0 -> 1 -> 2), so
// worker 2's own wait names a healthy rank.
TEST(ProcessGroupTimeouts, ABroadcastNamesTheFrozenRootBehindTheNeighbour) {
  const auto errors = timeouts_with_a_frozen_worker(3, 0, [](ProcessGroup& group) {
    Tensor tensor = Tensor::zeros({1000});
    group.broadcast(tensor, 0);
  });
  EXPECT_THAT(errors[2], HasSubstr("recv from rank 1 ("));
  EXPECT_THAT(errors[2], HasSubstr("broadcasting worker 0's tensor"));
  EXPECT_THAT(errors[2], HasSubstr("wait chain: rank 1 was itself waiting for rank 0 (broadcasting worker 0's "
                                   "tensor), which reported nothing"));
  EXPECT_THAT(errors[2], HasSubstr("rank 0 is likely the cause"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 is likely the cause"));
}

// Dissemination barrier of 4 with worker 1 away: worker 0 waits in its second round for worker
// 2, which is still in its first, waiting for worker 1.
TEST(ProcessGroupTimeouts, AJobBarrierNamesTheFrozenRankBehindTheNeighbour) {
  const auto errors = timeouts_with_a_frozen_worker(4, 1, [](ProcessGroup& group) { group.barrier(); });
  EXPECT_THAT(errors[0], HasSubstr("recv from rank 2 ("));
  EXPECT_THAT(errors[0], HasSubstr("at a job barrier"));
  EXPECT_THAT(errors[0], HasSubstr("wait chain: rank 2 was itself waiting for rank 1 (at a job barrier), which "
                                   "reported nothing"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 is likely the cause"));
  for (int rank : {2, 3}) EXPECT_THAT(errors[static_cast<std::size_t>(rank)], HasSubstr("rank 1 is likely the cause"));
}

// The training loop catches the barrier's timeout and asks for an explanation of its own
// (trainer.cc): the store holds one report per rank, and the error already has the finding.
TEST(ProcessGroupTimeouts, ATimeoutExplainedByTheBarrierIsNotExplainedAgain) {
  std::vector<std::string> again(3);
  std::vector<double> took(3);
  timeouts_with_a_frozen_worker(3, 2, [&](ProcessGroup& group) {
    try {
      group.barrier();
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("wait chain:"));
      const auto start = std::chrono::steady_clock::now();
      again[static_cast<std::size_t>(group.rank())] = group.explain_timeout(e, "saving a checkpoint");
      took[static_cast<std::size_t>(group.rank())] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
  });
  for (int rank : {0, 1}) {
    EXPECT_EQ(again[static_cast<std::size_t>(rank)], "") << "worker " << rank;
    EXPECT_LT(took[static_cast<std::size_t>(rank)], 0.5) << "worker " << rank;
  }
}

}  // namespace
}  // namespace aiacc::trainer
