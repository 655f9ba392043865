// Learning-rate schedules: an optional linear warm-up followed by a decay shape (constant, step,
// multistep, cosine, linear, exponential), with PyTorch's formulas. ScheduleOptions is the
// `optimizer.schedule` config section.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/schema.h"

namespace aiacc::optim {

// Every count is in optimiser steps. Decay shapes count t = step - warmup_steps, i.e. they start
// after the warm-up (as torch.optim.lr_scheduler.SequentialLR chains them).
struct ScheduleOptions {
  std::string type = "constant";
  std::int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;
  std::vector<std::int64_t> milestones;
  double gamma = 0.1;
  std::int64_t step_size = 1000;
  double min_lr = 0.0;
  std::int64_t total_steps = 0;

  template <class V>
  void visit(V& v) {
    v.field("type", type, "decay after warm-up",
            config::one_of({"constant", "step", "multistep", "cosine", "linear", "exponential"}));
    v.field("warmup_steps", warmup_steps, "steps of linear warm-up (0: none)",
            config::at_least<std::int64_t>(0));
    v.field("warmup_start_factor", warmup_start_factor,
            "warm-up starts at this fraction of lr and reaches lr at warmup_steps",
            config::in_range(0.0, 1.0));
    v.field("milestones", milestones,
            "multistep: steps after warm-up where lr is multiplied by gamma (increasing)");
    v.field("gamma", gamma, "step/multistep: factor per decay; exponential: factor per step",
            config::greater_than(0.0));
    v.field("step_size", step_size, "step: steps between decays by gamma",
            config::at_least<std::int64_t>(1));
    v.field("min_lr", min_lr, "cosine/linear: lr reached at total_steps (absolute, like eta_min)",
            config::at_least(0.0));
    v.field("total_steps", total_steps,
            "cosine/linear: length including warm-up (0: the trainer's step count)",
            config::at_least<std::int64_t>(0));
  }
  // Milestones increasing and positive; warm-up shorter than total_steps when that is set.
  void validate(const config::Node& node) const;
};

class LrSchedule {
 public:
  // `total_steps` is the trainer's step count, used when options.total_steps is 0. Throws
  // ConfigError (naming schedule.<key>) when cosine/linear has no total or the warm-up does not
  // fit in it, or when the options are out of their documented bounds.
  LrSchedule(const ScheduleOptions& options, double base_lr, std::int64_t total_steps);

  // The learning rate for 0-based step `step` (>= 0). Warm-up: base*(f + (1-f)*step/W) for
  // step < W; afterwards t = step - W and T = total - W:
  //   constant    base
  //   step        base * gamma^floor(t/step_size)                  (StepLR)
  //   multistep   base * gamma^(number of milestones <= t)         (MultiStepLR)
  //   cosine      min + (base-min)*(1 + cos(pi*min(t,T)/T))/2      (CosineAnnealingLR closed form)
  //   linear      base + (min-base)*min(t,T)/T                     (LinearLR to min_lr)
  //   exponential base * gamma^t                                   (ExponentialLR)
  // so lr_at(W) == base and, for cosine/linear, lr_at(total) == min_lr (and stays there).
  double lr_at(std::int64_t step) const;

  double base_lr() const { return base_lr_; }
  // Effective total steps (options.total_steps or the trainer's); 0 when unknown and unneeded.
  std::int64_t total_steps() const { return total_steps_; }

 private:
  double decayed(std::int64_t t) const;
  ScheduleOptions options_;
  double base_lr_;
  std::int64_t total_steps_;
};

}  // namespace aiacc::optim
