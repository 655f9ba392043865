// Row-major general matrix multiply on raw pointers, backed by Eigen. The one place dense CPU
// kernels (linear, conv2d) turn into matrix products. Eigen parallelises a product with OpenMP
// over omp_get_max_threads() threads, except when called from inside an OpenMP parallel region,
// where it runs single-threaded (so callers may parallelise over independent products instead).
#pragma once

#include <cstdint>

namespace aiacc::kernels {

// Whether an operand is read as stored or transposed.
enum class Trans : bool { no = false, yes = true };

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C[M, N]
//   M, N, K: matrix dimensions; op(X) is X or X^T.
//   A is stored row-major as [M, K] (Trans::no) or [K, M] (Trans::yes); likewise B as [K, N]
//   or [N, K]; C as [M, N]. All contiguous (leading dimension = row length).
// beta == 0 overwrites C without reading it (NaNs in C do not propagate). C must not alias A
// or B. Blocking; T is float or double.
template <class T>
void gemm(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, const T* b, T beta, T* c);

}  // namespace aiacc::kernels
