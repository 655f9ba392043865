// The dense gradients of a list of parameters that live on a device, gathered for one DeviceOps
// call over all of them (one wait), as clipping and gradient accumulation's mean take them; the
// others are on the host, which a model may keep some dense parameters on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/parameter.h"

namespace aiacc::trainer {

struct DeviceGradients {
  std::optional<Device> device;                          // none: every gradient is on the host
  std::vector<std::pair<float*, std::int64_t>> values;   // (data, count) of each device gradient
  std::vector<std::size_t> index;                        // values[i] is params[index[i]]'s
};

// InternalError naming `what` and the parameter where gradients are on two different devices.
DeviceGradients device_gradients(const std::vector<Parameter*>& params, const char* what);

}  // namespace aiacc::trainer
