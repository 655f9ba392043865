// LARS (You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks", 2017,
// Algorithm 1, as in the MLPerf ResNet reference): a layer-wise trust ratio scales the step.
//   trust = eta * ||w|| / (||g|| + wd*||w||)   (1 when either norm is 0)
//   v = momentum*v + lr*trust*(g + wd*w);  w -= v
// The learning rate sits inside the velocity, as in the paper, so a schedule change affects only
// new contributions. Parameters that do not decay (biases, norm scales) are excluded: the caller
// passes trust 1 and a rule with weight_decay 0, which leaves plain momentum SGD.
#pragma once

#include <span>

#include "core/optim/layer_norms.h"

namespace aiacc::optim {

struct LarsRule {
  double momentum = 0.9;            // 0 disables the velocity
  double weight_decay = 0.0;        // coupled (inside the trust ratio and the step)
  double trust_coefficient = 1e-3;  // eta

  // Floats of state per weight element: the velocity when momentum > 0, else none.
  int state_per_element() const { return momentum > 0.0 ? 1 : 0; }

  // eta*||w|| / (||g|| + wd*||w||), or 1 when ||w|| or ||g|| is 0 (nothing to compare with).
  double trust_ratio(double weight_norm, double grad_norm) const;

  // ||w||^2 and ||g||^2 of (a chunk of) the layer.
  SquaredNorms norms(std::span<const float> w, std::span<const float> g) const;

  // One step on equal-length spans with the layer's trust ratio. `velocity` is unused (may be
  // empty) without momentum and starts at 0.
  void update(std::span<float> w, std::span<const float> g, std::span<float> velocity, double lr,
              double trust) const;
};

}  // namespace aiacc::optim
