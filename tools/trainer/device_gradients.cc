#include "tools/trainer/device_gradients.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::trainer {

DeviceGradients device_gradients(const std::vector<Parameter*>& params, const char* what) {
  DeviceGradients out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor& grad = params[i]->grad();
    if (grad.device().is_cpu()) continue;
    if (out.device && *out.device != grad.device()) {
      throw InternalError(fmt::format("{}: '{}' has its gradient on {}, others on {}", what, params[i]->name(),
                                      grad.device().str(), out.device->str()));
    }
    out.device = grad.device();
    out.values.emplace_back(grad.data<float>(), grad.numel());
    out.index.push_back(i);
  }
  return out;
}

}  // namespace aiacc::trainer
