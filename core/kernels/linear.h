// Fully connected (linear) layer math on raw row-major pointers: forward and backward.
// Legend: N = batch, I = in_features, O = out_features.
#pragma once

#include <cstdint>

namespace aiacc::kernels {

struct LinearGeometry {
  std::int64_t batch = 0;         // N
  std::int64_t in_features = 0;   // I
  std::int64_t out_features = 0;  // O
  void validate() const;          // throws InternalError on a negative dimension
};

// y[N, O] = x[N, I] * w[O, I]^T + b[O]   (b may be null: no bias)
// y is overwritten and must not alias x, w or b. Multi-threaded (OpenMP through Eigen).
template <class T>
void linear_forward(const LinearGeometry& g, const T* x, const T* w, const T* b, T* y);

// Given dy = dL/dy [N, O] and the forward inputs x [N, I], w [O, I]:
//   dx[N, I] = dy * w        dw[O, I] = dy^T * x        db[O] = sum over N of dy
// Each output may be null (not wanted); the others are OVERWRITTEN, not accumulated.
// db is summed in double so large batches stay accurate in float.
template <class T>
void linear_backward(const LinearGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* db);

// db[O] = sum over N of dy[N, O]: the bias gradient of any op whose bias broadcasts over rows.
template <class T>
void bias_grad_rows(std::int64_t rows, std::int64_t cols, const T* dy, T* db);

}  // namespace aiacc::kernels
