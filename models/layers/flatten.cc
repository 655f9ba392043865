// Flatten layer: reshapes as views (no data movement).
#include "models/layers/flatten.h"

#include <algorithm>

#include "core/check.h"

namespace aiacc::models {

Tensor Flatten::forward(const Tensor& input, bool /*training*/) {
  AIACC_CHECK(input.rank() >= 1, "{}: cannot flatten a scalar of shape {}", name_,
              input.shape().str());
  input_shape_ = input.shape();
  const std::int64_t n = input.dim(0);
  // numel / n is undefined for an empty batch; the feature count is then the product of the
  // trailing dimensions.
  std::int64_t rest = 1;
  for (int axis = 1; axis < input.rank(); ++axis) rest *= input.dim(axis);
  return input.reshape(Shape{n, rest});
}

Tensor Flatten::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(input_shape_.rank() >= 1, "{}: backward() without a forward()", name_);
  AIACC_CHECK(grad_output.numel() == input_shape_.numel() && grad_output.rank() == 2 &&
                  grad_output.dim(0) == input_shape_[0],
              "{}: expected grad_output [{}, {}], got {}", name_, input_shape_[0],
              input_shape_.numel() / std::max<std::int64_t>(input_shape_[0], 1),
              grad_output.shape().str());
  if (!need_input_grad) return {};
  return grad_output.reshape(input_shape_);
}

}  // namespace aiacc::models
