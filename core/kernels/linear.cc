// Linear layer kernels: Eigen GEMM for the products, OpenMP loops for the bias terms.
#include "core/kernels/linear.h"

#include <algorithm>

#include "core/check.h"
#include "core/kernels/gemm.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {

void LinearGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && in_features >= 0 && out_features >= 0, "linear geometry N={} I={} O={}",
              batch, in_features, out_features);
}

template <class T>
void linear_forward(const LinearGeometry& g, const T* x, const T* w, const T* b, T* y) {
  g.validate();
  const std::int64_t n = g.batch, in = g.in_features, out = g.out_features;
  if (b != nullptr) {
    // Seed every row with the bias so the product can accumulate into it (beta = 1): one pass
    // over y instead of a second sweep after the GEMM.
    util::parallel_for(std::int64_t{0}, n, n * out >= 1 << 15,
                       [&](std::int64_t row) { std::copy(b, b + out, y + row * out); });
  }
  gemm<T>(Trans::no, Trans::yes, n, out, in, T(1), x, w, b != nullptr ? T(1) : T(0), y);
}

template <class T>
void bias_grad_rows(std::int64_t rows, std::int64_t cols, const T* dy, T* db) {
  // Column sums of a row-major matrix. Each thread owns a slab of columns and walks the rows,
  // so reads stay contiguous and no reduction between threads is needed.
  constexpr std::int64_t kSlab = 256;
  const std::int64_t slabs = (cols + kSlab - 1) / kSlab;
  util::parallel_for(std::int64_t{0}, slabs, rows * cols >= 1 << 15, [&](std::int64_t s) {
    double acc[kSlab];
    const std::int64_t begin = s * kSlab, end = std::min(cols, begin + kSlab);
    std::fill(acc, acc + (end - begin), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * cols;
      for (std::int64_t c = begin; c < end; ++c) acc[c - begin] += row[c];
    }
    for (std::int64_t c = begin; c < end; ++c) db[c] = static_cast<T>(acc[c - begin]);
  });
}

template <class T>
void linear_backward(const LinearGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* db) {
  g.validate();
  const std::int64_t n = g.batch, in = g.in_features, out = g.out_features;
  if (dx != nullptr) gemm<T>(Trans::no, Trans::no, n, in, out, T(1), dy, w, T(0), dx);
  if (dw != nullptr) gemm<T>(Trans::yes, Trans::no, out, in, n, T(1), dy, x, T(0), dw);
  if (db != nullptr) bias_grad_rows<T>(n, out, dy, db);
}

#define AIACC_INSTANTIATE_LINEAR(T)                                                             \
  template void linear_forward<T>(const LinearGeometry&, const T*, const T*, const T*, T*);     \
  template void linear_backward<T>(const LinearGeometry&, const T*, const T*, const T*, T*, T*, \
                                   T*);                                                         \
  template void bias_grad_rows<T>(std::int64_t, std::int64_t, const T*, T*);
AIACC_INSTANTIATE_LINEAR(float)
AIACC_INSTANTIATE_LINEAR(double)
#undef AIACC_INSTANTIATE_LINEAR

}  // namespace aiacc::kernels
