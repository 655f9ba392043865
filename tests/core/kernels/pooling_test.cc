// Pooling kernels: max and average pooling against naive references, the documented max-pool
// tie and NaN rules, and finite differences in float64 on inputs away from ties.
#include "core/kernels/pooling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/util/random.h"
#include "tests/core/kernels/dense_reference.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {

// Readable names for parameterised cases in failure messages (found by ADL).
void PrintTo(const Pool2dGeometry& g, std::ostream* os) { *os << g.str(); }

namespace {

namespace ref = testing::reference;
using testing::gradients_close;
using testing::numeric_gradient;
using testing::random_values;

// N, C, H, W, KH, KW, stride_h, stride_w, pad_h, pad_w
Pool2dGeometry geometry(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                        std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                        std::int64_t ph, std::int64_t pw) {
  return {n, c, h, w, kh, kw, sh, sw, ph, pw};
}

const Pool2dGeometry kGeometries[] = {
    geometry(2, 3, 8, 8, 2, 2, 2, 2, 0, 0),     // the classic 2x2/2
    geometry(1, 2, 7, 5, 3, 3, 2, 2, 1, 1),     // batch 1, odd non-square, padded (ResNet stem)
    geometry(3, 2, 6, 9, 3, 2, 1, 3, 1, 1),     // non-square window, mixed strides
    geometry(2, 1, 5, 5, 5, 5, 1, 1, 2, 2),     // window as large as the image, max padding
    geometry(1, 1, 1, 1, 1, 1, 1, 1, 0, 0),     // a single pixel
    geometry(4, 64, 32, 32, 3, 3, 2, 2, 1, 1),  // big enough for the OpenMP path
};

// Distinct values at least 1e-3 apart in random order: no two window elements tie, and a
// finite-difference step of 1e-6 cannot change any window's argmax.
std::vector<double> distinct_values(std::int64_t count, std::uint64_t seed) {
  std::vector<double> values(count);
  std::iota(values.begin(), values.end(), 0.0);
  Rng rng(seed);
  for (std::int64_t i = count - 1; i > 0; --i) {
    std::swap(values[i], values[rng.below(static_cast<std::uint64_t>(i + 1))]);
  }
  for (double& v : values) v = (v - count / 2.0) * 1e-3;
  return values;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

class DensePooling : public ::testing::TestWithParam<Pool2dGeometry> {};

template <class T>
void expect_pooling_matches_reference(const Pool2dGeometry& g, double tol) {
  const auto x = as<T>(random_values(g.input_numel(), 1));
  const auto dy = as<T>(random_values(g.output_numel(), 2));
  std::vector<T> y(g.output_numel(), T(9));
  std::vector<std::int64_t> argmax(g.output_numel(), -7);
  max_pool2d_forward<T>(g, x.data(), y.data(), argmax.data());
  const ref::MaxPoolResult expected = ref::max_pool2d(g, x.data());
  EXPECT_TRUE(ref::all_close(y, expected.y, 0, 0));
  EXPECT_EQ(argmax, expected.argmax);

  // Max backward: each dy lands on its argmax.
  std::vector<T> dx(g.input_numel(), T(9));
  max_pool2d_backward<T>(g, dy.data(), argmax.data(), dx.data());
  std::vector<double> dx_ref(g.input_numel());
  const std::int64_t out_plane = g.out_height() * g.out_width(), in_plane = g.height * g.width;
  for (std::int64_t i = 0; i < g.output_numel(); ++i) {
    dx_ref[(i / out_plane) * in_plane + expected.argmax[i]] += dy[i];
  }
  EXPECT_TRUE(ref::all_close(dx, dx_ref, tol, tol));

  std::vector<T> avg(g.output_numel(), T(9));
  avg_pool2d_forward<T>(g, x.data(), avg.data());
  EXPECT_TRUE(ref::all_close(avg, ref::avg_pool2d(g, x.data()), tol, tol));
}

TEST_P(DensePooling, MatchesNaiveReference) {
  ASSERT_NO_THROW(GetParam().validate());
  {
    SCOPED_TRACE("float");
    expect_pooling_matches_reference<float>(GetParam(), 1e-5);
  }
  {
    SCOPED_TRACE("double");
    expect_pooling_matches_reference<double>(GetParam(), 1e-12);
  }
}

TEST_P(DensePooling, GradientsMatchFiniteDifferences) {
  Pool2dGeometry g = GetParam();
  g.batch = 1;  // enough for the differences and keeps them cheap
  g.channels = std::min<std::int64_t>(g.channels, 2);
  auto x = distinct_values(g.input_numel(), 3);
  const auto dy = random_values(g.output_numel(), 4);
  std::vector<double> y(g.output_numel());
  std::vector<std::int64_t> argmax(g.output_numel());
  auto max_loss = [&] {
    max_pool2d_forward<double>(g, x.data(), y.data(), argmax.data());
    return std::inner_product(y.begin(), y.end(), dy.begin(), 0.0);
  };
  auto avg_loss = [&] {
    avg_pool2d_forward<double>(g, x.data(), y.data());
    return std::inner_product(y.begin(), y.end(), dy.begin(), 0.0);
  };
  std::vector<double> dx(x.size());
  max_loss();  // fills argmax for x itself
  max_pool2d_backward<double>(g, dy.data(), argmax.data(), dx.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(max_loss, x))) << "max pool";
  avg_pool2d_backward<double>(g, dy.data(), dx.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(avg_loss, x))) << "average pool";
}

INSTANTIATE_TEST_SUITE_P(Geometries, DensePooling, ::testing::ValuesIn(kGeometries),
                         [](const ::testing::TestParamInfo<Pool2dGeometry>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(DenseMaxPool, TiesGoToTheFirstMaximumInScanOrder) {
  // One 3x3 plane, 2x2 windows with stride 1: every window holds ties.
  const Pool2dGeometry g = geometry(1, 1, 3, 3, 2, 2, 1, 1, 0, 0);
  const std::vector<float> x = {1, 5, 5,  //
                                5, 5, 2,  //
                                0, 5, 5};
  std::vector<float> y(4);
  std::vector<std::int64_t> argmax(4);
  max_pool2d_forward<float>(g, x.data(), y.data(), argmax.data());
  EXPECT_EQ(y, (std::vector<float>{5, 5, 5, 5}));
  // Window (0,0): the 5 at (0,1) precedes those at (1,0) and (1,1) in row-major order;
  // window (1,0): the 5 at (1,0) precedes (1,1) and (2,1).
  EXPECT_EQ(argmax, (std::vector<std::int64_t>{1, 1, 3, 4}));
  std::vector<float> dx(9, -1.0f);
  max_pool2d_backward<float>(g, std::vector<float>{1, 10, 100, 1000}.data(), argmax.data(),
                             dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 11, 0, 100, 1000, 0, 0, 0, 0}));
}

TEST(DenseMaxPool, PaddingNeverWinsAndNaNPropagates) {
  const Pool2dGeometry g = geometry(1, 1, 2, 2, 2, 2, 2, 2, 1, 1);  // 4 windows, 1 real pixel each
  const std::vector<double> negative = {-4, -3, -2, -1};
  std::vector<double> y(4);
  std::vector<std::int64_t> argmax(4);
  max_pool2d_forward<double>(g, negative.data(), y.data(), argmax.data());
  EXPECT_EQ(y, negative);  // padding is not a 0 that beats negative inputs
  EXPECT_EQ(argmax, (std::vector<std::int64_t>{0, 1, 2, 3}));

  const Pool2dGeometry whole = geometry(1, 1, 2, 2, 2, 2, 1, 1, 0, 0);
  const double nan = std::nan("");
  const std::vector<double> with_nan = {1, nan, 3, nan};
  max_pool2d_forward<double>(whole, with_nan.data(), y.data(), argmax.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(argmax[0], 1);
}

TEST(DenseAvgPool, CountsPaddingInTheDivisor) {
  // count_include_pad=true: the corner window of a padded 3x3 covers 4 real pixels of 9.
  const Pool2dGeometry g = geometry(1, 1, 2, 2, 3, 3, 1, 1, 1, 1);
  const std::vector<float> x = {9, 9, 9, 9};
  std::vector<float> y(4);
  avg_pool2d_forward<float>(g, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>(4, 4.0f)));
}

TEST(DenseGlobalAvgPool, MeansAndGradients) {
  const std::int64_t n = 3, c = 5, spatial = 7 * 3;
  auto x = random_values(n * c * spatial, 10);
  const auto dy = random_values(n * c, 11);
  std::vector<double> y(n * c);
  global_avg_pool_forward<double>(n, c, spatial, x.data(), y.data());
  for (std::int64_t p = 0; p < n * c; ++p) {
    double sum = 0;
    for (std::int64_t i = 0; i < spatial; ++i) sum += x[p * spatial + i];
    EXPECT_NEAR(y[p], sum / spatial, 1e-14);
  }
  auto loss = [&] {
    global_avg_pool_forward<double>(n, c, spatial, x.data(), y.data());
    return std::inner_product(y.begin(), y.end(), dy.begin(), 0.0);
  };
  std::vector<double> dx(x.size());
  global_avg_pool_backward<double>(n, c, spatial, dy.data(), dx.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x)));

  // Float path over a plane large enough for OpenMP, against a double sum.
  const std::int64_t big_n = 8, big_c = 64, big_spatial = 32 * 32;
  const auto xf = as<float>(random_values(big_n * big_c * big_spatial, 12));
  std::vector<float> yf(big_n * big_c);
  global_avg_pool_forward<float>(big_n, big_c, big_spatial, xf.data(), yf.data());
  std::vector<double> expected(big_n * big_c);
  for (std::int64_t p = 0; p < big_n * big_c; ++p) {
    for (std::int64_t i = 0; i < big_spatial; ++i) expected[p] += xf[p * big_spatial + i];
    expected[p] /= big_spatial;
  }
  EXPECT_TRUE(ref::all_close(yf, expected, 1e-6, 1e-7));
}

TEST(DensePoolingGeometry, RejectsPaddingBeyondHalfTheWindow) {
  EXPECT_THROW(geometry(1, 1, 4, 4, 2, 2, 2, 2, 2, 0).validate(), InternalError);
  EXPECT_THROW(geometry(1, 1, 4, 4, 3, 3, 0, 1, 1, 1).validate(), InternalError);
  EXPECT_THROW(geometry(1, 1, 2, 2, 5, 5, 1, 1, 1, 1).validate(), InternalError);
  EXPECT_NO_THROW(geometry(1, 1, 4, 4, 3, 3, 2, 2, 1, 1).validate());
}

}  // namespace
}  // namespace aiacc::kernels
