// Gradient fusion: fused, overlapped allreduce of parameter gradients equals the exact sum;
// buckets are reduced while "backward" is still running; unused parameters, hooks firing in a
// different order on different ranks, plan mismatches and auto-tuning.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parameter.h"
#include "ring/gradient_fuser.h"
#include "tests/ring/ring_fixture.h"

namespace aiacc::ring {
namespace {

using testing::expected_sum;
using testing::input_value;
using testing::ring_options;
using testing::run_world;

const std::vector<std::int64_t> kSizes = {5, 1000, 30000, 1, 70000, 4096, 3, 20000};

std::vector<std::unique_ptr<Parameter>> make_parameters(int extra = 0) {
  std::vector<std::unique_ptr<Parameter>> params;
  for (std::size_t i = 0; i < kSizes.size() + static_cast<std::size_t>(extra); ++i) {
    const std::int64_t n = i < kSizes.size() ? kSizes[i] : 10;
    params.push_back(std::make_unique<Parameter>(fmt::format("layer{}.weight", i), Tensor::zeros(Shape{n})));
  }
  return params;
}

std::vector<Parameter*> pointers(const std::vector<std::unique_ptr<Parameter>>& params) {
  std::vector<Parameter*> out;
  for (const auto& p : params) out.push_back(p.get());
  return out;
}

// Fills parameter t's gradient with rank- and step-dependent integers.
void fill_grad(Parameter& p, int rank, int t, int step) {
  float* g = p.grad().data<float>();
  for (std::int64_t i = 0; i < p.grad().numel(); ++i) g[i] = static_cast<float>(input_value(rank + step, i + 101 * t));
}

// One step as backward runs it: every gradient written, then its hook fired, in order.
void run_step(GradientFuser& fuser, const std::vector<std::unique_ptr<Parameter>>& params, int rank, int step) {
  fuser.begin_step();
  for (std::size_t t = 0; t < params.size(); ++t) {
    fill_grad(*params[t], rank, static_cast<int>(t), step);
    params[t]->grad_ready();
  }
  fuser.finish_step();
}

void expect_sums(const std::vector<std::unique_ptr<Parameter>>& params, int world, int step) {
  for (std::size_t t = 0; t < params.size(); ++t) {
    const float* g = params[t]->grad().data<float>();
    for (std::int64_t i = 0; i < params[t]->grad().numel(); ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += input_value(r + step, i + 101 * static_cast<std::int64_t>(t));
      ASSERT_EQ(g[i], sum) << params[t]->name() << " element " << i << " step " << step;
    }
  }
}

FusionOptions sum_options(std::int64_t bucket_bytes) {
  FusionOptions options;
  options.bucket_bytes = bucket_bytes;
  options.spec.op = ReduceOp::kSum;
  options.spec.chunk_bytes = 16 * 1024;
  return options;
}

TEST(GradientFuser, FusedResultsEqualExactSums) {
  for (int world : {1, 2, 3}) {
    run_world(world, ring_options(2), [&](std::shared_ptr<Communicator> comm) {
      auto params = make_parameters();
      GradientFuser fuser(comm, pointers(params), sum_options(64 * 1024));
      EXPECT_GT(fuser.plan().buckets().size(), 2u);
      for (int step = 0; step < 3; ++step) {
        run_step(fuser, params, comm->rank(), step);
        expect_sums(params, world, step);
      }
    });
  }
}

TEST(GradientFuser, EarlyBucketsAreReducedWhileBackwardContinues) {
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    GradientFuser fuser(comm, pointers(params), sum_options(1));  // one bucket per tensor
    fuser.begin_step();
    for (std::size_t t = 0; t + 1 < params.size(); ++t) {
      fill_grad(*params[t], comm->rank(), static_cast<int>(t), 0);
      params[t]->grad_ready();
    }
    // Backward "still running" (the last gradient is not ready): the first buckets must
    // already be reduced and written back, without finish_step.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto first_reduced = [&] {
      return params[0]->grad().data<float>()[0] == static_cast<float>(expected_sum(2, 0));
    };
    while (!first_reduced() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(first_reduced()) << "bucket 0 was not reduced before backward finished";
    fill_grad(*params.back(), comm->rank(), static_cast<int>(params.size() - 1), 0);
    params.back()->grad_ready();
    fuser.finish_step();
    expect_sums(params, 2, 0);
  });
}

// Backward writes gradients straight into the buckets: each gradient is a view of one flat
// buffer in ready order, keeps the values it had before the fuser, and outlives the fuser.
TEST(GradientFuser, GradientsBecomeViewsOfTheBucketsAndKeepTheirValues) {
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    for (std::size_t t = 0; t < params.size(); ++t) fill_grad(*params[t], comm->rank(), static_cast<int>(t), 7);
    {
      GradientFuser fuser(comm, pointers(params), sum_options(64 * 1024));
      for (std::size_t t = 0; t + 1 < params.size(); ++t) {
        EXPECT_EQ(params[t]->grad().data<float>() + params[t]->grad().numel(), params[t + 1]->grad().data<float>())
            << params[t]->name();
      }
      for (std::size_t t = 0; t < params.size(); ++t) {
        const float* g = params[t]->grad().data<float>();
        for (std::int64_t i = 0; i < params[t]->grad().numel(); ++i) {
          ASSERT_EQ(g[i], static_cast<float>(input_value(comm->rank() + 7, i + 101 * static_cast<std::int64_t>(t))));
        }
      }
      // Hooks that never fire: the values already in the buckets are reduced.
      fuser.begin_step();
      fuser.finish_step();
    }
    expect_sums(params, 2, 7);
  });
}

TEST(GradientFuser, UnusedParametersAndRankDependentHookOrder) {
  run_world(3, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    GradientFuser fuser(comm, pointers(params), sum_options(128 * 1024));
    fuser.begin_step();
    for (std::size_t t = 0; t < params.size(); ++t) fill_grad(*params[t], comm->rank(), static_cast<int>(t), 0);
    // Rank 1 fires hooks backwards; parameter 3 never fires anywhere (unused in the graph).
    for (std::size_t k = 0; k < params.size(); ++k) {
      const std::size_t t = comm->rank() == 1 ? params.size() - 1 - k : k;
      if (t != 3) params[t]->grad_ready();
    }
    fuser.finish_step();
    expect_sums(params, 3, 0);
  });
}

TEST(GradientFuser, PlanMismatchIsAConfigErrorOnEveryRank) {
  std::vector<std::string> errors(2);
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters(comm->rank() == 1 ? 1 : 0);
    try {
      GradientFuser fuser(comm, pointers(params), sum_options(64 * 1024));
    } catch (const ConfigError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("different gradient bucket plans"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1: 9 tensors"), std::string::npos) << e;
  }
}

// Nothing to fuse is a ConfigError, not a step that indexes bucket -1.
TEST(GradientFuser, NoParametersIsAConfigError) {
  run_world(1, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    try {
      GradientFuser fuser(comm, {}, sum_options(64 * 1024));
      ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("gradient fusion: no dense parameters"), std::string::npos) << e.what();
    }
  });
}

// A one-bucket plan (the whole model in one bucket) and the plain plan, with the last bucket on
// the calling thread or on the communication thread: exact sums over several steps.
TEST(GradientFuser, OneBucketAndManyBucketPlansOnEitherThreadAreExact) {
  for (bool last_on_caller : {true, false}) {
    for (std::int64_t bucket_bytes : {std::int64_t{1} << 30, std::int64_t{64} * 1024}) {
      run_world(3, ring_options(2), [&](std::shared_ptr<Communicator> comm) {
        auto params = make_parameters();
        FusionOptions options = sum_options(bucket_bytes);
        options.last_bucket_on_caller = last_on_caller;
        GradientFuser fuser(comm, pointers(params), options);
        EXPECT_EQ(fuser.plan().buckets().size() == 1, bucket_bytes == std::int64_t{1} << 30);
        for (int step = 0; step < 4; ++step) {
          run_step(fuser, params, comm->rank(), step);
          expect_sums(params, 3, step);
        }
      });
    }
  }
}

// The last bucket failing on the calling thread (a silent peer) is a TimeoutError naming the
// peer, and it stays: the next step rethrows it instead of running collectives half-way
// through a protocol.
TEST(GradientFuser, ALastBucketFailureNamesThePeerAndStays) {
  std::string first, again;
  run_world(2, ring_options(1, 1.0), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    GradientFuser fuser(comm, pointers(params), sum_options(std::int64_t{1} << 30));
    if (comm->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    fuser.begin_step();
    try {
      fuser.finish_step();
    } catch (const TimeoutError& e) {
      first = e.what();
    }
    try {
      fuser.begin_step();
    } catch (const TimeoutError& e) {
      again = e.what();
    }
  });
  EXPECT_NE(first.find("from rank 1"), std::string::npos) << first;
  EXPECT_EQ(again, first);
}

TEST(GradientFuser, AutoTuningAgreesOnEveryRankAndStaysExact) {
  std::vector<TuningCandidate> chosen(2);
  run_world(2, ring_options(2), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    FusionOptions options = sum_options(64 * 1024);
    // One bucket (1 GiB) or many: the communication thread sleeps through the one-bucket steps.
    options.tune_bucket_bytes = {16 * 1024, std::int64_t{1} << 30};
    options.tune_streams = true;
    options.tune_measured_steps = 2;
    options.rebalance_every_runs = 3;
    GradientFuser fuser(comm, pointers(params), options);
    for (int step = 0; step < 14; ++step) {
      run_step(fuser, params, comm->rank(), step);
      expect_sums(params, 2, step);
    }
    ASSERT_TRUE(fuser.tuner()->done());  // 4 candidates x 3 steps = 12 steps
    chosen[static_cast<std::size_t>(comm->rank())] = fuser.tuner()->current();
  });
  EXPECT_EQ(chosen[0].bucket_bytes, chosen[1].bucket_bytes);
  EXPECT_EQ(chosen[0].streams, chosen[1].streams);
}

}  // namespace
}  // namespace aiacc::ring
