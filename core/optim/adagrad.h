// Adagrad: per-coordinate learning rates from the running sum of squared gradients, as
// torch.optim.Adagrad (without lr_decay). Plain math on spans.
#pragma once

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
};

}  // namespace aiacc::optim
