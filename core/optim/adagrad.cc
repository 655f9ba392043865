// AdagradRule: the torch.optim.Adagrad update, element by element in float.
#include "core/optim/adagrad.h"

#include <cmath>

#include "core/check.h"

namespace aiacc::optim {

void AdagradRule::update(std::span<float> w, std::span<const float> g, std::span<float> sum,
                         double lr) const {
  const std::size_t n = w.size();
  AIACC_CHECK_EQ(g.size(), n, "adagrad: gradient vs weights");
  AIACC_CHECK_EQ(sum.size(), n, "adagrad: sum vs weights");
  update_elements(w.data(), g.data(), sum.data(), n, lr);
}

}  // namespace aiacc::optim
