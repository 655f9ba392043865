// LarsRule: layer-wise trust ratio and the momentum step.
#include "core/optim/lars.h"

#include "core/check.h"

namespace aiacc::optim {

double LarsRule::trust_ratio(double weight_norm, double grad_norm) const {
  // A zero norm means a fresh zero-initialised layer or no signal: fall back to the global rate
  // instead of freezing the layer (ratio 0) or dividing by zero.
  if (weight_norm <= 0.0 || grad_norm <= 0.0) return 1.0;
  return trust_coefficient * weight_norm / (grad_norm + weight_decay * weight_norm);
}

SquaredNorms LarsRule::norms(std::span<const float> w, std::span<const float> g) const {
  return {sum_of_squares(w), sum_of_squares(g)};
}

void LarsRule::update(std::span<float> w, std::span<const float> g, std::span<float> velocity,
                      double lr, double trust) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "lars: gradient vs weights");
  const float wd = static_cast<float>(weight_decay);
  const float scaled_lr = static_cast<float>(lr * trust);
  if (state_per_element() == 0) {
    for (std::size_t i = 0; i < n; ++i) w[i] -= scaled_lr * (g[i] + wd * w[i]);
    return;
  }
  AIACC_CHECK_EQ(velocity.size(), n, "lars: velocity vs weights");
  const float mu = static_cast<float>(momentum);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = mu * velocity[i] + scaled_lr * (g[i] + wd * w[i]);
    velocity[i] = v;
    w[i] -= v;
  }
}

}  // namespace aiacc::optim
