// Squared L2 norms for the layer-wise rules (LARS, LAMB) and gradient clipping, accumulated in
// double so a large tensor's norm does not lose the small terms.
#pragma once

#include <span>

namespace aiacc::optim {

// ||w||^2 and the squared norm of the tensor a rule compares it with (LARS: the gradient,
// LAMB: the Adam update). Sums of chunks add up to the whole.
struct SquaredNorms {
  double weights = 0.0;
  double other = 0.0;
  SquaredNorms& operator+=(const SquaredNorms& o) {
    weights += o.weights;
    other += o.other;
    return *this;
  }
};

// Sum of squares of `values`, in double, in a fixed order: equal bits wherever the values are
// equal (every worker holding the same averaged gradients takes the same clipping decision).
double sum_of_squares(std::span<const float> values);

}  // namespace aiacc::optim
