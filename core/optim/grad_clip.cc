#include "core/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace aiacc::optim {

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  if (std::isnan(norm)) return norm;  // std::min would make it 1: no clipping of a NaN gradient
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void scale_in_place(std::span<float> values, float factor) {
  for (float& v : values) v *= factor;
}

}  // namespace aiacc::optim
