// SgdRule: the torch.optim.SGD update, element by element in float.
#include "core/optim/sgd.h"

#include "core/check.h"

namespace aiacc::optim {

void SgdRule::update(std::span<float> w, std::span<const float> g, std::span<float> momentum_buf,
                     std::int64_t step, double lr) const {
  AIACC_CHECK_EQ(w.size(), g.size(), "sgd: weights vs gradient");
  const float wd = static_cast<float>(weight_decay);
  const float rate = static_cast<float>(lr);
  const std::size_t n = w.size();
  if (state_per_element() == 0) {
    for (std::size_t i = 0; i < n; ++i) w[i] -= rate * (g[i] + wd * w[i]);
    return;
  }
  AIACC_CHECK_EQ(momentum_buf.size(), n, "sgd: momentum buffer vs weights");
  const float mu = static_cast<float>(momentum);
  const float keep = static_cast<float>(1.0 - dampening);
  // PyTorch starts the buffer at the first gradient rather than at zero, so dampening does not
  // shrink the very first step.
  const bool first = step <= 1;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    const float buf = first ? d : mu * momentum_buf[i] + keep * d;
    momentum_buf[i] = buf;
    w[i] -= rate * (nesterov ? d + mu * buf : buf);
  }
}

}  // namespace aiacc::optim
