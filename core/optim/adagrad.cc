// AdagradRule: the torch.optim.Adagrad update, element by element in float.
#include "core/optim/adagrad.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {
namespace {

// __restrict: the weights, gradient and sum never overlap. Without it GCC guards its vector
// loop with an overlap test that a parameter-server row fails (sum follows the weights 32 bytes
// later at dim 8), so rows were updated one scalar sqrt and divide at a time.
void adagrad_elements(float* __restrict w, const float* __restrict g, float* __restrict sum,
                      std::size_t n, float wd, float rate, float epsilon) {
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = g[i] + wd * w[i];
    const float s = sum[i] + grad * grad;
    sum[i] = s;
    w[i] -= rate * (grad / (std::sqrt(s) + epsilon));
  }
}

}  // namespace

void AdagradRule::update(std::span<float> w, std::span<const float> g, std::span<float> sum,
                         double lr) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "adagrad: gradient vs weights");
  AIACC_CHECK_EQ(sum.size(), n, "adagrad: sum vs weights");
  const float wd = static_cast<float>(weight_decay);
  const float rate = static_cast<float>(lr);
  const float epsilon = static_cast<float>(eps);
  adagrad_elements(w.data(), g.data(), sum.data(), n, wd, rate, epsilon);
}

}  // namespace aiacc::optim
