// Gradient fusion on devices (DeviceGradientFuser) over the fake accelerator, whose collective
// reduces through the CPU ring: exact sums for worlds 1-3, buckets queued during backward and
// always in plan order (hooks firing in rank-dependent orders), unused parameters, gradients
// that become views of one device buffer, a plan mismatch, a host parameter refused, and a
// failing collective reported through the hook that queued it.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parameter.h"
#include "ring/device_gradient_fuser.h"
#include "tests/ring/ring_fixture.h"
#include "tests/testing/fake_device.h"
#include "tests/testing/fake_device_collective.h"

namespace aiacc::ring {
namespace {

using testing::FakeDeviceCollective;
using testing::input_value;
using testing::ring_options;
using testing::run_world;

const std::vector<std::int64_t> kSizes = {5, 1000, 30000, 1, 70000, 4096, 3, 20000};
const Device kDevice = Device::cuda(0);

std::vector<std::unique_ptr<Parameter>> make_parameters(int extra = 0, Device device = kDevice) {
  testing::install_fake_device();
  std::vector<std::unique_ptr<Parameter>> params;
  for (std::size_t i = 0; i < kSizes.size() + static_cast<std::size_t>(extra); ++i) {
    const std::int64_t n = i < kSizes.size() ? kSizes[i] : 10;
    params.push_back(std::make_unique<Parameter>(fmt::format("layer{}.weight", i),
                                                 Tensor::zeros(Shape{n}, DType::f32, device)));
  }
  return params;
}

std::vector<Parameter*> pointers(const std::vector<std::unique_ptr<Parameter>>& params) {
  std::vector<Parameter*> out;
  for (const auto& p : params) out.push_back(p.get());
  return out;
}

float grad_value(int rank, std::size_t t, std::int64_t i, int step) {
  return static_cast<float>(input_value(rank + step, i + 101 * static_cast<std::int64_t>(t)));
}

// Writes parameter t's gradient (on the device) with rank- and step-dependent integers.
void fill_grad(Parameter& p, int rank, std::size_t t, int step) {
  Tensor host = Tensor::zeros(p.grad().shape());
  float* g = host.data<float>();
  for (std::int64_t i = 0; i < host.numel(); ++i) g[i] = grad_value(rank, t, i, step);
  p.grad().copy_from(host);
}

std::unique_ptr<DeviceGradientFuser> make_fuser(std::shared_ptr<Communicator> comm,
                                                const std::vector<std::unique_ptr<Parameter>>& params,
                                                std::int64_t bucket_bytes = 64 * 1024) {
  return std::make_unique<DeviceGradientFuser>(std::make_unique<FakeDeviceCollective>(comm, kDevice), comm,
                                               pointers(params), bucket_bytes, ReduceOp::kSum);
}

const FakeDeviceCollective& fake(const DeviceGradientFuser& fuser) {
  return dynamic_cast<const FakeDeviceCollective&>(fuser.collective());
}

void expect_sums(const std::vector<std::unique_ptr<Parameter>>& params, int world, int step) {
  for (std::size_t t = 0; t < params.size(); ++t) {
    const Tensor g = params[t]->grad().to(Device::cpu());
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += grad_value(r, t, i, step);
      ASSERT_EQ(g.data<float>()[i], sum) << params[t]->name() << " element " << i << " step " << step;
    }
  }
}

// The collective saw every bucket of `steps` steps once per step, in plan order.
void expect_plan_order(const DeviceGradientFuser& fuser, int steps) {
  const auto& calls = fake(fuser).calls();
  const auto& buckets = fuser.plan().buckets();
  ASSERT_EQ(calls.size(), buckets.size() * static_cast<std::size_t>(steps));
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const PlannedBucket& bucket = buckets[c % buckets.size()];
    EXPECT_EQ(calls[c].count, bucket.count) << "call " << c;
    EXPECT_EQ(calls[c].data - calls[c % buckets.size()].data, 0) << "call " << c;
  }
  for (std::size_t b = 1; b < buckets.size(); ++b) {
    EXPECT_EQ(calls[b].data - calls[0].data, buckets[b].offset) << "bucket " << b;
  }
}

TEST(DeviceGradientFuser, FusedResultsOnTheDeviceEqualExactSums) {
  for (int world : {1, 2, 3}) {
    run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
      auto params = make_parameters();
      auto fuser = make_fuser(comm, params);
      EXPECT_GT(fuser->plan().buckets().size(), 2u);
      for (int step = 0; step < 3; ++step) {
        fuser->begin_step();
        for (std::size_t t = 0; t < params.size(); ++t) {
          fill_grad(*params[t], comm->rank(), t, step);
          params[t]->grad_ready();
        }
        fuser->finish_step();
        EXPECT_EQ(fake(*fuser).unsynchronized(), 0) << "finish_step waits for the collectives";
        EXPECT_GT(fuser->last_communication_seconds(), 0.0) << "the collectives' busy time";
        expect_sums(params, world, step);
      }
      expect_plan_order(*fuser, 3);
    });
  }
}

// A bucket is queued from the hook of its last gradient, before backward goes on; the
// gradients are views of one device buffer in ready order and keep the values they had.
TEST(DeviceGradientFuser, BucketsAreQueuedDuringBackwardFromOneDeviceBuffer) {
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    fill_grad(*params[2], comm->rank(), 2, 7);
    auto fuser = make_fuser(comm, params);
    EXPECT_TRUE(params[2]->grad().device() == kDevice);
    const Tensor kept = params[2]->grad().to(Device::cpu());
    EXPECT_EQ(kept.data<float>()[3], grad_value(comm->rank(), 2, 3, 7)) << "rebinding keeps the values";
    for (std::size_t t = 1; t < params.size(); ++t) {
      EXPECT_EQ(params[t]->grad().data<float>() - params[0]->grad().data<float>(), fuser->plan().tensors()[t].offset);
    }
    const PlannedBucket& first = fuser->plan().buckets().front();
    fuser->begin_step();
    for (std::size_t t = 0; t < params.size(); ++t) {
      fill_grad(*params[t], comm->rank(), t, 0);
      params[t]->grad_ready();
      const bool first_complete = t + 1 >= first.tensors.size();
      EXPECT_EQ(fake(*fuser).calls().size() >= 1, first_complete) << "after tensor " << t;
    }
    EXPECT_EQ(fuser->buckets_queued(), static_cast<std::int64_t>(fuser->plan().buckets().size()))
        << "every bucket queued before finish_step";
    fuser->finish_step();
    expect_sums(params, 2, 0);
  });
}

// Hooks fire in a different order on each rank and one parameter gets no hook at all: buckets
// still go out in plan order on every rank (or the ranks' collectives would pair wrongly), and
// the unused parameter contributes its gradient at finish_step.
TEST(DeviceGradientFuser, RankDependentHookOrderAndUnusedParameters) {
  run_world(3, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    auto fuser = make_fuser(comm, params, 32 * 1024);
    std::vector<std::size_t> order(params.size());
    std::iota(order.begin(), order.end(), 0);
    if (comm->rank() == 1) std::reverse(order.begin(), order.end());
    if (comm->rank() == 2) std::rotate(order.begin(), order.begin() + 3, order.end());
    for (int step = 0; step < 2; ++step) {
      fuser->begin_step();
      for (std::size_t t : order) fill_grad(*params[t], comm->rank(), t, step);
      for (std::size_t t : order) {
        if (t != 4) params[t]->grad_ready();  // parameter 4 unused this step
      }
      fuser->finish_step();
      expect_sums(params, 3, step);
    }
    expect_plan_order(*fuser, 2);
  });
}

TEST(DeviceGradientFuser, PlanMismatchIsAConfigErrorOnEveryRank) {
  std::vector<std::string> errors(2);
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters(comm->rank() == 1 ? 1 : 0);
    try {
      make_fuser(comm, params);
    } catch (const ConfigError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("gradient fusion on devices"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1: 9 tensors"), std::string::npos) << e;
  }
}

TEST(DeviceGradientFuser, AHostParameterIsRefusedByName) {
  run_world(1, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    params[3] = std::make_unique<Parameter>("head.bias", Tensor::zeros(Shape{4}));
    try {
      make_fuser(comm, params);
      ADD_FAILURE() << "a CPU parameter was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'head.bias' is on cpu"), std::string::npos) << e.what();
    }
  });
}

// A collective that cannot be queued fails the hook that queued it (inside backward), with the
// collective's own message, and every later step rethrows it.
class FailingCollective : public DeviceCollective {
 public:
  void allreduce(float*, std::int64_t, ReduceOp) override {
    throw CommError("rank 0: NCCL 'dense-gradients': allreduce failed: remote process exited");
  }
  void wait_for_compute() override {}
  void synchronize() override {}
  double take_busy_seconds() override { return 0; }
  std::string describe() const override { return "failing"; }
};

TEST(DeviceGradientFuser, AFailingCollectiveSurfacesFromTheHook) {
  run_world(1, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    auto params = make_parameters();
    DeviceGradientFuser fuser(std::make_unique<FailingCollective>(), comm, pointers(params), 1 << 30,
                              ReduceOp::kSum);
    fuser.begin_step();
    for (std::size_t t = 0; t + 1 < params.size(); ++t) params[t]->grad_ready();
    try {
      params.back()->grad_ready();
      ADD_FAILURE() << "no error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("remote process exited"), std::string::npos) << e.what();
    }
    // The failure stays: the next step reports it, not a "begin_step twice" of its own.
    try {
      fuser.begin_step();
      ADD_FAILURE() << "the failure was forgotten";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("remote process exited"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace aiacc::ring
