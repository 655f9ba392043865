// AdamRule: the torch.optim.Adam / AdamW update, element by element in float.
#include "core/optim/adam.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {

void AdamRule::update(std::span<float> w, std::span<const float> g, std::span<float> exp_avg,
                      std::span<float> exp_avg_sq, std::int64_t step, double lr) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "adam: gradient vs weights");
  AIACC_CHECK_EQ(exp_avg.size(), n, "adam: exp_avg vs weights");
  AIACC_CHECK_EQ(exp_avg_sq.size(), n, "adam: exp_avg_sq vs weights");
  AIACC_CHECK_GE(step, 1, "adam: steps are 1-based");
  // Scalars in double (as PyTorch computes them in Python), the per-element work in float.
  const double t = static_cast<double>(step);
  const double correction1 = 1.0 - std::pow(beta1, t);
  const double correction2 = 1.0 - std::pow(beta2, t);
  const float step_size = static_cast<float>(lr / correction1);
  const float correction2_sqrt = static_cast<float>(std::sqrt(correction2));
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float b2 = static_cast<float>(beta2);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const float epsilon = static_cast<float>(eps);
  const float wd = static_cast<float>(weight_decay);
  const float shrink = static_cast<float>(1.0 - lr * weight_decay);
  for (std::size_t i = 0; i < n; ++i) {
    float grad = g[i];
    if (decoupled) {
      w[i] *= shrink;  // AdamW decays the weight itself, outside the adaptive scaling
    } else {
      grad += wd * w[i];  // Adam's L2 term goes through the moments like any gradient
    }
    // m + (1-beta1)*(g-m) is PyTorch's lerp form of beta1*m + (1-beta1)*g.
    const float m = exp_avg[i] + one_minus_b1 * (grad - exp_avg[i]);
    const float v = b2 * exp_avg_sq[i] + one_minus_b2 * grad * grad;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    w[i] -= step_size * (m / (std::sqrt(v) / correction2_sqrt + epsilon));
  }
}

}  // namespace aiacc::optim
