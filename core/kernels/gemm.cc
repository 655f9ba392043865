// Eigen-backed row-major GEMM (see gemm.h).
#include "core/kernels/gemm.h"

// Eigen 3.4's AVX headers trip -Wunused-variable (-Werror) because meson adds eigen3 as a
// normal, not a system, include directory; silence it for Eigen's headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include "core/check.h"

namespace aiacc::kernels {
namespace {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using MutableMap = Eigen::Map<RowMatrix<T>>;

// Writes alpha * product (+ beta * C) into C; `noalias` because C never aliases the operands.
template <class T, class Product>
void assign(MutableMap<T>& c, T alpha, const Product& product, T beta) {
  if (beta == T(0)) {
    if (alpha == T(1)) {
      c.noalias() = product;
    } else {
      c.noalias() = alpha * product;
    }
  } else {
    if (beta != T(1)) c *= beta;
    if (alpha == T(1)) {
      c.noalias() += product;
    } else {
      c.noalias() += alpha * product;
    }
  }
}

}  // namespace

template <class T>
void gemm(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, const T* b, T beta, T* c) {
  AIACC_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm dimensions M={} N={} K={}", m, n, k);
  if (m == 0 || n == 0) return;
  MutableMap<T> c_map(c, m, n);
  if (k == 0) {
    // An empty sum: C = beta * C (and exactly zero for beta == 0).
    if (beta == T(0)) {
      c_map.setZero();
    } else {
      c_map *= beta;
    }
    return;
  }
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  ConstMap<T> a_map(a, ta ? k : m, ta ? m : k);
  ConstMap<T> b_map(b, tb ? n : k, tb ? k : n);
  // Transposing a row-major Map is free (Eigen reinterprets it as column-major), so each case
  // is a single product expression that reaches Eigen's blocked GEMM.
  if (!ta && !tb) {
    assign(c_map, alpha, a_map * b_map, beta);
  } else if (ta && !tb) {
    assign(c_map, alpha, a_map.transpose() * b_map, beta);
  } else if (!ta && tb) {
    assign(c_map, alpha, a_map * b_map.transpose(), beta);
  } else {
    assign(c_map, alpha, a_map.transpose() * b_map.transpose(), beta);
  }
}

template void gemm<float>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, float,
                          const float*, const float*, float, float*);
template void gemm<double>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, double,
                           const double*, const double*, double, double*);

}  // namespace aiacc::kernels
