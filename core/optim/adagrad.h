// Adagrad: per-coordinate learning rates from the running sum of squared gradients, as
// torch.optim.Adagrad (without lr_decay). Plain math on spans.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

namespace aiacc::optim {

struct AdagradRule {
  double eps = 1e-10;                // added to sqrt(sum)
  double weight_decay = 0.0;         // coupled: weight_decay * w is added to the gradient
  double initial_accumulator = 0.0;  // starting value of every sum (state initialisation)

  // Floats of state per weight element: the sum of squared gradients.
  int state_per_element() const { return 1; }

  // One step on equal-length spans: g += wd*w; sum += g^2; w -= lr * g / (sqrt(sum) + eps).
  // `sum` must start at initial_accumulator.
  void update(std::span<float> w, std::span<const float> g, std::span<float> sum, double lr) const;

  // The same step on n elements of three arrays that do not overlap, inline: a parameter
  // server applies it to one short row after another (dim 8: eight lanes), where a call per
  // row with its checks cost as much as the arithmetic. __restrict: without it GCC guards its
  // vector loop with an overlap test that a row fails (sum follows the weights), and updates
  // the row one scalar sqrt and divide at a time.
  void update_elements(float* __restrict w, const float* __restrict g, float* __restrict sum, std::size_t n,
                       double lr) const {
    const float wd = static_cast<float>(weight_decay);
    const float rate = static_cast<float>(lr);
    const float epsilon = static_cast<float>(eps);
    for (std::size_t i = 0; i < n; ++i) {
      const float grad = g[i] + wd * w[i];
      const float s = sum[i] + grad * grad;
      sum[i] = s;
      w[i] -= rate * (grad / (std::sqrt(s) + epsilon));
    }
  }
};

}  // namespace aiacc::optim
