// A DeviceCollective for the fake accelerator (tests/testing/fake_device.h), whose "device"
// memory is host memory (behind tagged pointers): each allreduce runs at once through the CPU
// ring on the ranks' host communicator, so the device-gradient path (DeviceGradientFuser, the
// trainer's choice of it) runs and is checked without a GPU. It records every call for tests.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/allreduce.h"
#include "ring/device_collective.h"
#include "tests/testing/fake_device.h"

namespace aiacc::testing {

class FakeDeviceCollective : public ring::DeviceCollective {
 public:
  struct Call {
    const float* data;
    std::int64_t count;
  };

  FakeDeviceCollective(std::shared_ptr<ring::Communicator> host, Device device)
      : host_(std::move(host)), device_(device) {}

  void allreduce(float* device_data, std::int64_t count, ring::ReduceOp op) override {
    calls_.push_back({device_data, count});
    auto& allreduce = allreduces_[{device_data, count, op}];
    if (!allreduce) {
      ring::AllreduceSpec spec;
      spec.op = op;
      // The fake's device pointers are tagged; the memory behind them is the host's.
      allreduce = std::make_unique<ring::Allreduce>(host_, ring::Buffer{host(device_data), count, DType::f32}, spec);
    }
    const auto start = std::chrono::steady_clock::now();
    allreduce->run();
    busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++unsynchronized_;
  }
  void wait_for_compute() override {}  // the fake's ops ran when they were called
  void synchronize() override { unsynchronized_ = 0; }
  double take_busy_seconds() override { return std::exchange(busy_seconds_, 0.0); }
  std::string describe() const override { return fmt::format("the fake device collective on {}", device_.str()); }

  const std::vector<Call>& calls() const { return calls_; }
  int unsynchronized() const { return unsynchronized_; }

 private:
  std::shared_ptr<ring::Communicator> host_;
  Device device_;
  std::map<std::tuple<const float*, std::int64_t, ring::ReduceOp>, std::unique_ptr<ring::Allreduce>> allreduces_;
  std::vector<Call> calls_;
  int unsynchronized_ = 0;
  double busy_seconds_ = 0;
};

// Registers FakeDeviceCollective for DeviceKind::cuda (the fake accelerator's kind). With
// AIACC_TEST_DEVICE_COLLECTIVE_FAIL set, joining fails as NCCL's init does for two ranks on one
// GPU (for the trainer's error message).
inline void install_fake_device_collective() {
  ring::register_device_collective(DeviceKind::cuda, [](const ring::DeviceCollectiveSpec& spec) {
    if (std::getenv("AIACC_TEST_DEVICE_COLLECTIVE_FAIL") != nullptr) {
      throw CommError(fmt::format("rank {}: NCCL '{}': init failed: invalid usage (Duplicate GPU detected)",
                                  spec.rank, spec.name));
    }
    return std::unique_ptr<ring::DeviceCollective>(std::make_unique<FakeDeviceCollective>(spec.host, spec.device));
  });
}

}  // namespace aiacc::testing
