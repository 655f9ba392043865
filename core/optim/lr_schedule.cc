// LrSchedule: warm-up plus the PyTorch decay formulas in closed form.
#include "core/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/config/node.h"
#include "core/error.h"

namespace aiacc::optim {

void ScheduleOptions::validate(const config::Node& node) const {
  for (std::size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 1) {
      node.child("milestones")
          .element(i)
          .fail(fmt::format("milestones must be >= 1, got {}", milestones[i]));
    }
    if (i > 0 && milestones[i] <= milestones[i - 1]) {
      node.child("milestones")
          .element(i)
          .fail(fmt::format("milestones must be strictly increasing, got {} after {}",
                            milestones[i], milestones[i - 1]));
    }
  }
  if (type == "multistep" && milestones.empty()) {
    node.child("milestones").fail("multistep needs at least one milestone");
  }
  const bool needs_total = type == "cosine" || type == "linear";
  if (total_steps > 0 && (needs_total ? total_steps <= warmup_steps : total_steps < warmup_steps)) {
    node.child("total_steps")
        .fail(fmt::format("total_steps {} leaves no room after warmup_steps {}", total_steps,
                          warmup_steps));
  }
}

LrSchedule::LrSchedule(const ScheduleOptions& options, double base_lr, std::int64_t total_steps)
    : options_(options),
      base_lr_(base_lr),
      total_steps_(options.total_steps > 0 ? options.total_steps : total_steps) {
  // The config reader enforces these for YAML input; a struct built in code gets the same checks.
  auto fail = [](const char* key, const std::string& message) {
    throw ConfigError(fmt::format("schedule.{}: {}", key, message));
  };
  if (!(base_lr > 0.0)) throw ConfigError(fmt::format("lr: expected a value > 0, got {}", base_lr));
  if (options.warmup_steps < 0) fail("warmup_steps", "expected a value >= 0");
  if (options.warmup_start_factor < 0.0 || options.warmup_start_factor > 1.0) {
    fail("warmup_start_factor", "expected a value in [0, 1]");
  }
  if (options.type == "step" && options.step_size < 1) fail("step_size", "expected a value >= 1");
  if (!(options.gamma > 0.0)) fail("gamma", "expected a value > 0");
  if (!std::is_sorted(options.milestones.begin(), options.milestones.end())) {
    fail("milestones", "expected increasing steps");
  }
  if (options.type == "cosine" || options.type == "linear") {
    if (total_steps_ <= 0) {
      fail("total_steps",
           fmt::format("{} decay needs the total step count (set schedule.total_steps "
                       "or the trainer's step count)",
                       options.type));
    }
    if (total_steps_ <= options.warmup_steps) {
      fail("total_steps", fmt::format("total steps {} leave no room after warmup_steps {}",
                                      total_steps_, options.warmup_steps));
    }
    if (options.min_lr > base_lr) {
      fail("min_lr", fmt::format("min_lr {} exceeds the base lr {}", options.min_lr, base_lr));
    }
  } else if (options.type != "constant" && options.type != "step" && options.type != "multistep" &&
             options.type != "exponential") {
    fail("type", fmt::format("unknown schedule '{}'", options.type));
  }
}

double LrSchedule::lr_at(std::int64_t step) const {
  const std::int64_t warmup = options_.warmup_steps;
  if (step < warmup) {
    const double f = options_.warmup_start_factor;
    return base_lr_ * (f + (1.0 - f) * static_cast<double>(step) / static_cast<double>(warmup));
  }
  return decayed(step - warmup);
}

double LrSchedule::decayed(std::int64_t t) const {
  const std::string& type = options_.type;
  if (type == "step") {
    return base_lr_ * std::pow(options_.gamma, static_cast<double>(t / options_.step_size));
  }
  if (type == "multistep") {
    const auto passed =
        std::upper_bound(options_.milestones.begin(), options_.milestones.end(), t) -
        options_.milestones.begin();
    return base_lr_ * std::pow(options_.gamma, static_cast<double>(passed));
  }
  if (type == "exponential") return base_lr_ * std::pow(options_.gamma, static_cast<double>(t));
  if (type == "cosine" || type == "linear") {
    // Past the end both stay at min_lr (PyTorch's closed cosine would rise again: not wanted).
    const double span = static_cast<double>(total_steps_ - options_.warmup_steps);
    const double progress = std::min(static_cast<double>(t), span) / span;
    const double low = options_.min_lr;
    if (type == "linear") return base_lr_ + (low - base_lr_) * progress;
    return low + (base_lr_ - low) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return base_lr_;  // constant
}

}  // namespace aiacc::optim
