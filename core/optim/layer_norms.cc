// Squared norms in double for LARS and LAMB.
#include "core/optim/layer_norms.h"

namespace aiacc::optim {

double sum_of_squares(std::span<const float> values) {
  double total = 0.0;
  for (float v : values) total += static_cast<double>(v) * static_cast<double>(v);
  return total;
}

}  // namespace aiacc::optim
