#include "ring/device_collective.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/net/deadline.h"

namespace aiacc::ring {
namespace {

constexpr std::size_t kKinds = static_cast<std::size_t>(DeviceKind::cuda) + 1;

struct Registry {
  std::mutex mutex;
  std::array<DeviceCollectiveFactory, kKinds> by_kind;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

class StallCheckedCollective : public DeviceCollective {
 public:
  StallCheckedCollective(std::unique_ptr<DeviceCollective> inner, net::RendezvousClient& rendezvous,
                         std::string name, int world_size, double window_s)
      : inner_(std::move(inner)),
        rendezvous_(rendezvous),
        name_(std::move(name)),
        world_size_(world_size),
        window_s_(window_s) {}

  void allreduce(float* device_data, std::int64_t count, ReduceOp op) override {
    checked([&] { inner_->allreduce(device_data, count, op); });
  }
  void wait_for_compute() override {
    checked([&] { inner_->wait_for_compute(); });
  }
  void synchronize() override {
    checked([&] { inner_->synchronize(); });
  }
  double take_busy_seconds() override { return inner_->take_busy_seconds(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  template <class Call>
  void checked(Call&& call) {
    try {
      call();
    } catch (const TimeoutError& e) {
      if (checked_) throw;
      throw TimeoutError(with_findings(e.what()));
    } catch (const CommError& e) {
      if (checked_) throw;
      throw CommError(with_findings(e.what()));
    }
  }

  // The failure's message, and who came to the stall check.
  std::string with_findings(const std::string& failure) {
    checked_ = true;
    const std::string barrier = fmt::format("device-collective/{}/stall-check", name_);
    try {
      // Only the collective's ranks come: the job's other ranks (parameter-server shards,
      // ranks from world_size_ on) never do.
      const std::vector<int> missing = rendezvous_.meet(barrier, net::deadline_after(window_s_), world_size_);
      if (missing.empty()) {
        return fmt::format("{}; stall check: every rank came to the rendezvous store after this failure, so all are "
                           "alive: ranks issued collectives in different orders or sizes, or the network between "
                           "them failed", failure);
      }
      return fmt::format("{}; stall check: rank{} {} did not come to the rendezvous store within {:.1f} s of this "
                         "failure: stopped, dead or cut off", failure, missing.size() == 1 ? "" : "s",
                         fmt::join(missing, ", "), window_s_);
    } catch (const TimeoutError& e) {
      return fmt::format("{}; stall check: the rendezvous store did not answer, so its server (rank 0 under an "
                         "outer launcher, else the local launcher) may be what is missing ({})", failure, e.what());
    } catch (const std::exception& e) {
      // Typically another rank's failure reported to the store meanwhile ("rank 2 failed: ...").
      return fmt::format("{}; stall check cut short: {}", failure, e.what());
    }
  }

  std::unique_ptr<DeviceCollective> inner_;
  net::RendezvousClient& rendezvous_;
  std::string name_;
  int world_size_;
  double window_s_;
  bool checked_ = false;
};

}  // namespace

void register_device_collective(DeviceKind kind, DeviceCollectiveFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_kind[static_cast<std::size_t>(kind)] = std::move(factory);
}

bool has_device_collective(DeviceKind kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return static_cast<bool>(r.by_kind[static_cast<std::size_t>(kind)]);
}

std::unique_ptr<DeviceCollective> make_device_collective(const DeviceCollectiveSpec& spec) {
  DeviceCollectiveFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    factory = r.by_kind[static_cast<std::size_t>(spec.device.kind)];
  }
  if (!factory) {
    throw ConfigError(fmt::format("{}: no device collectives are registered for this device kind (a build "
                                  "without NCCL?)", spec.device.str()));
  }
  std::unique_ptr<DeviceCollective> collective = factory(spec);
  const double window_s = std::min(spec.stall_check_s, spec.timeout_s);
  if (spec.rendezvous == nullptr || spec.world_size < 2 || !(window_s > 0.0)) return collective;
  return with_stall_check(std::move(collective), *spec.rendezvous, spec.name, spec.world_size, window_s);
}

std::unique_ptr<DeviceCollective> with_stall_check(std::unique_ptr<DeviceCollective> inner,
                                                   net::RendezvousClient& rendezvous, std::string name,
                                                   int world_size, double window_s) {
  return std::make_unique<StallCheckedCollective>(std::move(inner), rendezvous, std::move(name), world_size,
                                                  window_s);
}

}  // namespace aiacc::ring
