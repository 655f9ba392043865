// Parameter initialisation shared by the layers (internal to models/).
#pragma once

#include "core/tensor.h"
#include "core/util/random.h"

namespace aiacc::models::detail {

// A tensor of `shape` filled with uniform(-bound, bound) draws from `rng`, drawn in float64 and
// rounded to `dtype`, so f32 and f64 layers built from one seed start from the same values.
inline Tensor uniform_tensor(const Shape& shape, DType dtype, double bound, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::f64);
  for (double& v : t.span<double>()) v = rng.uniform(-bound, bound);
  return dtype == DType::f64 ? t : t.to(dtype);
}

}  // namespace aiacc::models::detail
