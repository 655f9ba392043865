// Element-wise binary kernels on raw pointers: the additions a residual block needs (the
// shortcut join and, in backward, the sum of the gradients of both paths). Parallel with OpenMP
// (and SIMD) once the tensor is large enough to be worth splitting.
// Legend: count = number of elements (any shape; the ops are element-wise).
#pragma once

#include <cstdint>

namespace aiacc::kernels {

// y[i] = a[i] + b[i]. y may equal a or b (in place).
template <class T>
void add(std::int64_t count, const T* a, const T* b, T* y);

// y[i] = max(a[i] + b[i], 0), the residual join followed by its ReLU in one pass (one write of
// y instead of two). y may equal a or b. A NaN sum stays NaN, like relu_forward. Differentiate
// with relu_backward on y.
template <class T>
void add_relu_forward(std::int64_t count, const T* a, const T* b, T* y);

}  // namespace aiacc::kernels
