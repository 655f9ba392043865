// train.clip_grad_norm in the trainer: the dense gradients, averaged over the workers by the
// time it runs, scaled by optim::clip_factor of their global norm before the optimiser step,
// and what the progress reports say about it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/parameter.h"

namespace aiacc::trainer {

struct ClipOutcome {
  double norm = 0.0;     // the global L2 norm before clipping
  bool clipped = false;  // the gradients were scaled down
};

// Scales the gradients of `params` to `max_norm` (> 0) when their global norm is above it.
// Gradients on a device are summed and scaled there (DeviceOps, one wait), those on the host on
// the CPU: a model may keep some dense parameters on the host. Equal gradients give equal bits,
// so every worker decides alike.
ClipOutcome clip_gradients(const std::vector<Parameter*>& params, double max_norm);

// The steps since the last progress report.
struct ClipInterval {
  double norm_sum = 0.0;
  std::int64_t steps = 0;
  std::int64_t clipped = 0;

  void add(const ClipOutcome& outcome);
  // " grad norm 0.3304 (clipped 5/50)", or "" without a clipped-or-not step.
  std::string describe() const;
  // grad_norm (the interval's mean) and clipped_steps, when there were steps.
  void add_to(nlohmann::json& record) const;
};

}  // namespace aiacc::trainer
