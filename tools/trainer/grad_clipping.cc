#include "tools/trainer/grad_clipping.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/optim/grad_clip.h"
#include "tools/trainer/device_gradients.h"

namespace aiacc::trainer {
namespace {

std::span<float> host_values(Parameter& p) {
  return {p.grad().data<float>(), static_cast<std::size_t>(p.grad().numel())};
}

}  // namespace

ClipOutcome clip_gradients(const std::vector<Parameter*>& params, double max_norm) {
  const DeviceGradients on_device = device_gradients(params, "gradient clipping");
  double squares = 0.0;
  for (Parameter* p : params) {
    if (p->grad().device().is_cpu()) squares += optim::sum_of_squares(host_values(*p));
  }
  if (on_device.device) {
    const std::vector<std::pair<const float*, std::int64_t>> read(on_device.values.begin(), on_device.values.end());
    squares += device_ops(*on_device.device).sum_of_squares(*on_device.device, read);
  }
  ClipOutcome outcome;
  outcome.norm = std::sqrt(squares);
  const double factor = optim::clip_factor(outcome.norm, max_norm);
  outcome.clipped = factor < 1.0;
  if (!outcome.clipped) return outcome;
  for (Parameter* p : params) {
    if (p->grad().device().is_cpu()) optim::scale_in_place(host_values(*p), static_cast<float>(factor));
  }
  if (on_device.device) {
    device_ops(*on_device.device).multiply_and_check(*on_device.device, on_device.values, static_cast<float>(factor));
  }
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
