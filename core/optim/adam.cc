// AdamRule: the torch.optim.Adam / AdamW update, element by element in float.
#include "core/optim/adam.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {
namespace {

// __restrict: weights, gradient and moments never overlap. Without it GCC guards its vector loop
// with an overlap test that a parameter-server row fails (its moments follow the weights a few
// dozen bytes later), and the row is updated one scalar sqrt and divide at a time.
void adam_elements(float* __restrict w, const float* __restrict g, float* __restrict exp_avg,
                   float* __restrict exp_avg_sq, std::size_t n, const AdamStepScalars& c) {
  for (std::size_t i = 0; i < n; ++i) {
    float grad = g[i];
    if (c.decoupled) {
      w[i] *= c.shrink;  // AdamW decays the weight itself, outside the adaptive scaling
    } else {
      grad += c.wd * w[i];  // Adam's L2 term goes through the moments like any gradient
    }
    // m + (1-beta1)*(g-m) is PyTorch's lerp form of beta1*m + (1-beta1)*g.
    const float m = exp_avg[i] + c.one_minus_b1 * (grad - exp_avg[i]);
    const float v = c.b2 * exp_avg_sq[i] + c.one_minus_b2 * grad * grad;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    w[i] -= c.step_size * (m / (std::sqrt(v) / c.correction2_sqrt + c.epsilon));
  }
}

}  // namespace

void AdamRule::update(std::span<float> w, std::span<const float> g, std::span<float> exp_avg,
                      std::span<float> exp_avg_sq, std::int64_t step, double lr) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "adam: gradient vs weights");
  AIACC_CHECK_EQ(exp_avg.size(), n, "adam: exp_avg vs weights");
  AIACC_CHECK_EQ(exp_avg_sq.size(), n, "adam: exp_avg_sq vs weights");
  adam_elements(w.data(), g.data(), exp_avg.data(), exp_avg_sq.data(), n, step_scalars(step, lr));
}

AdamStepScalars AdamRule::step_scalars(std::int64_t step, double lr) const {
  AIACC_CHECK_GE(step, 1, "adam: steps are 1-based");
  // Scalars in double (as PyTorch computes them in Python), the per-element work in float.
  const double t = static_cast<double>(step);
  const double correction1 = 1.0 - std::pow(beta1, t);
  const double correction2 = 1.0 - std::pow(beta2, t);
  return AdamStepScalars{static_cast<float>(lr / correction1),
                         static_cast<float>(std::sqrt(correction2)),
                         static_cast<float>(1.0 - beta1),
                         static_cast<float>(beta2),
                         static_cast<float>(1.0 - beta2),
                         static_cast<float>(eps),
                         static_cast<float>(weight_decay),
                         static_cast<float>(1.0 - lr * weight_decay),
                         decoupled};
}

}  // namespace aiacc::optim
