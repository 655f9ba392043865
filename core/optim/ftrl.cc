// FtrlRule: FTRL-Proximal per coordinate, in float.
#include "core/optim/ftrl.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {

float FtrlRule::weight(float z, float n, double alpha) const {
  const float l1_f = static_cast<float>(l1);
  if (std::fabs(z) <= l1_f) return 0.0f;  // the L1 term pins the weight to exactly zero
  const float shrunk = z > 0.0f ? z - l1_f : z + l1_f;
  const float denominator = (static_cast<float>(beta) + std::sqrt(n)) / static_cast<float>(alpha) +
                            static_cast<float>(l2);
  return -shrunk / denominator;
}

void FtrlRule::update(std::span<float> w, std::span<const float> g, std::span<float> z,
                      std::span<float> n, double alpha) const {
  const std::size_t count = w.size();
  AIACC_CHECK_EQ(g.size(), count, "ftrl: gradient vs weights");
  AIACC_CHECK_EQ(z.size(), count, "ftrl: z vs weights");
  AIACC_CHECK_EQ(n.size(), count, "ftrl: n vs weights");
  // A rate of 0 (a warm-up's first step, a decay down to min_lr 0) is no step, as in the other
  // rules: sigma = g^2 / (... x 0) would make z infinite and the weight inf / inf = NaN.
  if (!(alpha > 0.0)) return;
  const float alpha_f = static_cast<float>(alpha);
  for (std::size_t i = 0; i < count; ++i) {
    const float grad = g[i];
    const float n_old = n[i];
    const float n_new = n_old + grad * grad;
    const float root_old = std::sqrt(n_old);
    const float root_new = std::sqrt(n_new);
    // sqrt(n+g^2) - sqrt(n) == g^2 / (sqrt(n+g^2) + sqrt(n)): the same value without the
    // cancellation that ruins the difference in float once n is large.
    const float sum_roots = root_new + root_old;
    const float sigma = sum_roots > 0.0f ? grad * grad / (sum_roots * alpha_f) : 0.0f;
    z[i] += grad - sigma * w[i];
    n[i] = n_new;
    w[i] = weight(z[i], n_new, alpha);
  }
}

}  // namespace aiacc::optim
