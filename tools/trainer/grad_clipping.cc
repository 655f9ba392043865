#include "tools/trainer/grad_clipping.h"

#include <cmath>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/optim/grad_clip.h"

namespace aiacc::trainer {
namespace {

std::span<float> host_values(Parameter& p) {
  return {p.grad().data<float>(), static_cast<std::size_t>(p.grad().numel())};
}

}  // namespace

ClipOutcome clip_gradients(const std::vector<Parameter*>& params, double max_norm) {
  double squares = 0.0;
  std::optional<Device> device;
  std::vector<std::pair<float*, std::int64_t>> on_device;
  for (Parameter* p : params) {
    const Device where = p->grad().device();
    if (where.is_cpu()) {
      squares += optim::sum_of_squares(host_values(*p));
      continue;
    }
    if (device && *device != where) {
      throw InternalError(fmt::format("gradient clipping: '{}' has its gradient on {}, others on {}", p->name(),
                                      where.str(), device->str()));
    }
    device = where;
    on_device.emplace_back(p->grad().data<float>(), p->grad().numel());
  }
  if (device) {
    const std::vector<std::pair<const float*, std::int64_t>> read(on_device.begin(), on_device.end());
    squares += device_ops(*device).sum_of_squares(*device, read);
  }
  ClipOutcome outcome;
  outcome.norm = std::sqrt(squares);
  const double factor = optim::clip_factor(outcome.norm, max_norm);
  outcome.clipped = factor < 1.0;
  if (!outcome.clipped) return outcome;
  for (Parameter* p : params) {
    if (p->grad().device().is_cpu()) optim::scale_in_place(host_values(*p), static_cast<float>(factor));
  }
  if (device) device_ops(*device).multiply_and_check(*device, on_device, static_cast<float>(factor));
  return outcome;
}

void ClipInterval::add(const ClipOutcome& outcome) {
  norm_sum += outcome.norm;
  ++steps;
  clipped += outcome.clipped ? 1 : 0;
}

std::string ClipInterval::describe() const {
  if (steps == 0) return "";
  return fmt::format(" grad norm {:.4g} (clipped {}/{})", norm_sum / static_cast<double>(steps), clipped, steps);
}

void ClipInterval::add_to(nlohmann::json& record) const {
  if (steps == 0) return;
  record["grad_norm"] = norm_sum / static_cast<double>(steps);
  record["clipped_steps"] = clipped;
}

}  // namespace aiacc::trainer
