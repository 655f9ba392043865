// Squared norms in double for LARS, LAMB and gradient clipping.
#include "core/optim/layer_norms.h"

#include <cstddef>

namespace aiacc::optim {

double sum_of_squares(std::span<const float> values) {
  // Eight independent accumulators (so the loop vectorises), combined in a fixed order.
  constexpr std::size_t kLanes = 8;
  double lanes[kLanes] = {};
  const std::size_t n = values.size();
  const std::size_t whole = n - n % kLanes;
  for (std::size_t i = 0; i < whole; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      const double v = values[i + k];
      lanes[k] += v * v;
    }
  }
  for (std::size_t i = whole; i < n; ++i) {
    const double v = values[i];
    lanes[i - whole] += v * v;
  }
  double total = 0.0;
  for (double lane : lanes) total += lane;
  return total;
}

}  // namespace aiacc::optim
