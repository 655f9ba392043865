// The registry of device ops: one slot per device kind.
#include "core/device_ops.h"

#include <array>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc {
namespace {

constexpr std::size_t kKinds = static_cast<std::size_t>(DeviceKind::cuda) + 1;

struct Registry {
  std::mutex mutex;
  // Replaced ops are kept too: a layer may still hold a reference from before.
  std::vector<std::unique_ptr<DeviceOps>> owned;
  std::array<DeviceOps*, kKinds> by_kind{};
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

std::string ActivationFormat::str() const {
  return fmt::format("{} {}", dtype_name(dtype), channels_last ? "nhwc" : "nchw");
}

void register_device_ops(DeviceKind kind, std::unique_ptr<DeviceOps> ops) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_kind[static_cast<std::size_t>(kind)] = ops.get();
  r.owned.push_back(std::move(ops));
}

DeviceOps& device_ops(const Device& device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  DeviceOps* ops = r.by_kind[static_cast<std::size_t>(device.kind)];
  if (ops == nullptr) {
    throw Error(fmt::format("no compute ops for {}: this build or process has not registered that "
                            "device (a CUDA build registers cuda at start-up)",
                            device.str()));
  }
  return *ops;
}

}  // namespace aiacc
