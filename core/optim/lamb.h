// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
// ICLR 2020): Adam moments with bias correction, and a layer-wise trust ratio on the update.
//   u = (m/(1-beta1^t)) / (sqrt(v/(1-beta2^t)) + eps) + wd*w
//   trust = ||w|| / ||u||   (1 when either norm is 0);  w -= lr * trust * u
// The trust ratio is not clamped (the paper's phi is the identity here, as in NVIDIA apex and
// timm's defaults). Parameters that do not decay get trust 1 and weight_decay 0 from the caller.
// A layer takes two passes: advance_moments() over all chunks (collecting norms), then apply().
#pragma once

#include <cstdint>
#include <span>

#include "core/optim/layer_norms.h"

namespace aiacc::optim {

struct LambRule {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.0;  // decoupled: enters the update u, not the moments

  // Floats of state per weight element: exp_avg and exp_avg_sq.
  int state_per_element() const { return 2; }

  // Pass 1 on (a chunk of) the layer: advances the moments with `g` and returns ||w||^2 and
  // ||u||^2 of this chunk. `step` is 1-based.
  SquaredNorms advance_moments(std::span<const float> w, std::span<const float> g,
                               std::span<float> exp_avg, std::span<float> exp_avg_sq,
                               std::int64_t step) const;

  // ||w|| / ||u||, or 1 when either is 0.
  double trust_ratio(double weight_norm, double update_norm) const;

  // Pass 2: w -= lr * trust * u, with u recomputed from the advanced moments (the same float
  // operations as pass 1, so the norm matches the step taken).
  void apply(std::span<float> w, std::span<const float> exp_avg, std::span<const float> exp_avg_sq,
             std::int64_t step, double lr, double trust) const;
};

}  // namespace aiacc::optim
