#include "ring/device_collective.h"

#include <array>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"

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
  return factory(spec);
}

}  // namespace aiacc::ring
