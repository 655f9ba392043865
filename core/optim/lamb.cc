// LambRule: moments, update norm and the trust-scaled step.
#include "core/optim/lamb.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {
namespace {

// The bias-corrected Adam direction plus decoupled decay, shared by both passes.
struct UpdateTerms {
  float inv_correction1;
  float inv_correction2;
  float eps;
  float wd;
  float operator()(float w, float m, float v) const {
    return (m * inv_correction1) / (std::sqrt(v * inv_correction2) + eps) + wd * w;
  }
};

UpdateTerms terms(const LambRule& rule, std::int64_t step) {
  AIACC_CHECK_GE(step, 1, "lamb: steps are 1-based");
  const double t = static_cast<double>(step);
  return {static_cast<float>(1.0 / (1.0 - std::pow(rule.beta1, t))),
          static_cast<float>(1.0 / (1.0 - std::pow(rule.beta2, t))), static_cast<float>(rule.eps),
          static_cast<float>(rule.weight_decay)};
}

}  // namespace

SquaredNorms LambRule::advance_moments(std::span<const float> w, std::span<const float> g,
                                       std::span<float> exp_avg, std::span<float> exp_avg_sq,
                                       std::int64_t step) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "lamb: gradient vs weights");
  AIACC_CHECK_EQ(exp_avg.size(), n, "lamb: exp_avg vs weights");
  AIACC_CHECK_EQ(exp_avg_sq.size(), n, "lamb: exp_avg_sq vs weights");
  const UpdateTerms update = terms(*this, step);
  const float b1 = static_cast<float>(beta1);
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float b2 = static_cast<float>(beta2);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  SquaredNorms norms;
  for (std::size_t i = 0; i < n; ++i) {
    const float m = b1 * exp_avg[i] + one_minus_b1 * g[i];
    const float v = b2 * exp_avg_sq[i] + one_minus_b2 * g[i] * g[i];
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const double u = update(w[i], m, v);
    norms.weights += static_cast<double>(w[i]) * w[i];
    norms.other += u * u;
  }
  return norms;
}

double LambRule::trust_ratio(double weight_norm, double update_norm) const {
  // Zero weights (fresh layer) or a zero update: take the plain step rather than none.
  if (weight_norm <= 0.0 || update_norm <= 0.0) return 1.0;
  return weight_norm / update_norm;
}

void LambRule::apply(std::span<float> w, std::span<const float> exp_avg,
                     std::span<const float> exp_avg_sq, std::int64_t step, double lr,
                     double trust) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(exp_avg.size(), n, "lamb: exp_avg vs weights");
  AIACC_CHECK_EQ(exp_avg_sq.size(), n, "lamb: exp_avg_sq vs weights");
  const UpdateTerms update = terms(*this, step);
  const float scaled_lr = static_cast<float>(lr * trust);
  for (std::size_t i = 0; i < n; ++i) w[i] -= scaled_lr * update(w[i], exp_avg[i], exp_avg_sq[i]);
}

}  // namespace aiacc::optim
