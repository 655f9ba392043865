// Element-wise activations on raw pointers: ReLU forward and backward. Parallel with OpenMP
// (and SIMD) once the tensor is large enough to be worth splitting.
// Legend: count = number of elements (any shape; the ops are element-wise).
#pragma once

#include <cstdint>

namespace aiacc::kernels {

// y[i] = max(x[i], 0). y may equal x (in place). NaN inputs give NaN outputs.
template <class T>
void relu_forward(std::int64_t count, const T* x, T* y);

// dx[i] = dy[i] if y[i] > 0, else 0, where y is the forward OUTPUT (y > 0 exactly when x > 0,
// so the input works too). The gradient at exactly 0 is 0, like PyTorch. dx may equal dy.
template <class T>
void relu_backward(std::int64_t count, const T* y, const T* dy, T* dx);

}  // namespace aiacc::kernels
