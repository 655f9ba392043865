// GEMM and linear kernels: against naive loops (float and double, odd sizes, every
// transposition) and finite differences in float64.
#include "core/kernels/linear.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "core/kernels/gemm.h"
#include "tests/core/kernels/dense_reference.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

namespace ref = testing::reference;
using testing::gradients_close;
using testing::numeric_gradient;
using testing::random_values;

template <class T>
std::vector<T> random_vector(std::size_t count, std::uint64_t seed) {
  std::vector<double> v = random_values(count, seed);
  return {v.begin(), v.end()};
}

template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-11;
}

template <class T>
class DenseGemm : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DenseGemm, FloatTypes);

TYPED_TEST(DenseGemm, MatchesNaiveForEveryTransposition) {
  using T = TypeParam;
  struct Case {
    std::int64_t m, n, k;
  };
  // Odd sizes, vectors, and one product big enough for Eigen to split across threads.
  for (const Case c : {Case{1, 1, 1}, Case{7, 5, 3}, Case{1, 13, 9}, Case{17, 1, 4},
                       Case{33, 65, 129}, Case{150, 96, 200}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const auto a = random_vector<T>(c.m * c.k, 1);
        const auto b = random_vector<T>(c.k * c.n, 2);
        auto out = random_vector<T>(c.m * c.n, 3);
        const T alpha = T(0.75), beta = T(-0.5);
        std::vector<double> expected(c.m * c.n);
        for (std::int64_t i = 0; i < c.m; ++i) {
          for (std::int64_t j = 0; j < c.n; ++j) {
            double sum = 0;
            for (std::int64_t p = 0; p < c.k; ++p) {
              const double av = ta ? a[p * c.m + i] : a[i * c.k + p];
              const double bv = tb ? b[j * c.k + p] : b[p * c.n + j];
              sum += av * bv;
            }
            expected[i * c.n + j] = alpha * sum + beta * double(out[i * c.n + j]);
          }
        }
        gemm<T>(Trans{ta}, Trans{tb}, c.m, c.n, c.k, alpha, a.data(), b.data(), beta, out.data());
        EXPECT_TRUE(ref::all_close(out, expected, tolerance<T>(), tolerance<T>()))
            << "M=" << c.m << " N=" << c.n << " K=" << c.k << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

TYPED_TEST(DenseGemm, BetaZeroIgnoresNaNInOutput) {
  using T = TypeParam;
  const std::vector<T> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<T> c(4, std::numeric_limits<T>::quiet_NaN());
  gemm<T>(Trans::no, Trans::no, 2, 2, 2, T(1), a.data(), b.data(), T(0), c.data());
  EXPECT_EQ(c, (std::vector<T>{19, 22, 43, 50}));
  std::vector<T> empty_sum(4, T(3));
  gemm<T>(Trans::no, Trans::no, 2, 2, 0, T(1), a.data(), b.data(), T(2), empty_sum.data());
  EXPECT_EQ(empty_sum, (std::vector<T>(4, T(6))));
}

struct LinearCase {
  std::int64_t batch, in, out;
  bool bias;
};
const LinearCase kLinearCases[] = {
    {1, 1, 1, true}, {1, 7, 3, false}, {5, 9, 4, true}, {13, 31, 17, true}, {64, 100, 70, false}};

TYPED_TEST(DenseGemm, LinearForwardAndBackwardMatchNaive) {
  using T = TypeParam;
  for (const LinearCase& c : kLinearCases) {
    const LinearGeometry g{c.batch, c.in, c.out};
    const auto x = random_vector<T>(c.batch * c.in, 10);
    const auto w = random_vector<T>(c.out * c.in, 11);
    const auto b = random_vector<T>(c.out, 12);
    const auto dy = random_vector<T>(c.batch * c.out, 13);
    const T* bias = c.bias ? b.data() : nullptr;
    std::vector<T> y(c.batch * c.out);
    linear_forward<T>(g, x.data(), w.data(), bias, y.data());
    EXPECT_TRUE(ref::all_close(y, ref::linear(c.batch, c.in, c.out, x.data(), w.data(), bias),
                               tolerance<T>(), tolerance<T>()));

    // Sentinels in the outputs prove backward overwrites instead of accumulating.
    std::vector<T> dx(c.batch * c.in, T(7)), dw(c.out * c.in, T(7)), db(c.out, T(7));
    linear_backward<T>(g, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    std::vector<double> dx_ref(c.batch * c.in), dw_ref(c.out * c.in), db_ref(c.out);
    for (std::int64_t n = 0; n < c.batch; ++n) {
      for (std::int64_t o = 0; o < c.out; ++o) {
        db_ref[o] += dy[n * c.out + o];
        for (std::int64_t i = 0; i < c.in; ++i) {
          dx_ref[n * c.in + i] += double(dy[n * c.out + o]) * w[o * c.in + i];
          dw_ref[o * c.in + i] += double(dy[n * c.out + o]) * x[n * c.in + i];
        }
      }
    }
    EXPECT_TRUE(ref::all_close(dx, dx_ref, tolerance<T>(), tolerance<T>()));
    EXPECT_TRUE(ref::all_close(dw, dw_ref, tolerance<T>(), tolerance<T>()));
    EXPECT_TRUE(ref::all_close(db, db_ref, tolerance<T>(), tolerance<T>()));
  }
}

TEST(DenseLinear, BiasGradientOfWideAndTallMatrices) {
  // More columns than one slab (256) and more rows than one thread's share.
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 700}, {2000, 5}}) {
    const auto dy = random_vector<float>(rows * cols, 21);
    std::vector<float> db(cols);
    bias_grad_rows<float>(rows, cols, dy.data(), db.data());
    std::vector<double> expected(cols);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) expected[c] += dy[r * cols + c];
    EXPECT_TRUE(ref::all_close(db, expected, 1e-5, 1e-5));
  }
}

TEST(DenseLinear, GradientsMatchFiniteDifferences) {
  for (const LinearCase& c : {LinearCase{1, 3, 2, true}, LinearCase{4, 5, 3, true}}) {
    const LinearGeometry g{c.batch, c.in, c.out};
    auto x = random_values(c.batch * c.in, 30);
    auto w = random_values(c.out * c.in, 31);
    auto b = random_values(c.out, 32);
    const auto dy = random_values(c.batch * c.out, 33);
    // loss = sum(dy * y), so dL/dy = dy.
    auto loss = [&] {
      std::vector<double> y(c.batch * c.out);
      linear_forward<double>(g, x.data(), w.data(), b.data(), y.data());
      double sum = 0;
      for (std::size_t i = 0; i < y.size(); ++i) sum += dy[i] * y[i];
      return sum;
    };
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    linear_backward<double>(g, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x)));
    EXPECT_TRUE(gradients_close(dw, numeric_gradient(loss, w)));
    EXPECT_TRUE(gradients_close(db, numeric_gradient(loss, b)));
  }
}

TEST(DenseLinear, NullOutputsAreSkipped) {
  const LinearGeometry g{2, 3, 4};
  const auto x = random_vector<float>(6, 40), w = random_vector<float>(12, 41);
  const auto dy = random_vector<float>(8, 42);
  std::vector<float> dw(12), db(4);
  linear_backward<float>(g, x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr);
  linear_backward<float>(g, x.data(), w.data(), dy.data(), nullptr, nullptr, db.data());
  EXPECT_NE(dw, std::vector<float>(12));
  EXPECT_NE(db, std::vector<float>(4));
}

}  // namespace
}  // namespace aiacc::kernels
