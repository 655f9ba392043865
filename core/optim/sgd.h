// SGD with momentum, dampening, Nesterov and coupled (L2) weight decay, with the semantics of
// torch.optim.SGD. Plain math on spans: no I/O, no allocation; thread-safe on disjoint spans.
#pragma once

#include <cstdint>
#include <span>

namespace aiacc::optim {

struct SgdRule {
  double momentum = 0.0;      // 0 disables the momentum buffer
  double dampening = 0.0;     // shrinks the new gradient's share of the buffer (not at step 1)
  bool nesterov = false;      // step along g + momentum * buf instead of buf
  double weight_decay = 0.0;  // coupled: weight_decay * w is added to the gradient

  // Floats of state per weight element: the momentum buffer when momentum > 0, else none.
  int state_per_element() const { return momentum > 0.0 ? 1 : 0; }

  // One step on equal-length spans: d = g + wd*w; buf = d at step 1, else
  // momentum*buf + (1-dampening)*d; w -= lr * (nesterov ? d + momentum*buf : buf).
  // `momentum_buf` is unused (may be empty) without momentum. `step` is 1-based.
  void update(std::span<float> w, std::span<const float> g, std::span<float> momentum_buf,
              std::int64_t step, double lr) const;
};

}  // namespace aiacc::optim
