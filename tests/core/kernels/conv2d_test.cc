// Conv2d kernels against the naive reference (float and double; odd, non-square, strided,
// padded, pointwise and batch-1 geometries; 1 to 3 threads) and finite differences in float64.
#include "core/kernels/conv2d.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/kernels/conv2d_direct.h"
#include "tests/core/kernels/dense_reference.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {

// Readable names for parameterised cases in failure messages (found by ADL).
void PrintTo(const Conv2dGeometry& g, std::ostream* os) { *os << g.str(); }

namespace {

namespace ref = testing::reference;
using testing::gradients_close;
using testing::numeric_gradient;
using testing::random_values;

template <class T>
std::vector<T> random_vector(std::int64_t count, std::uint64_t seed) {
  std::vector<double> v = random_values(static_cast<std::size_t>(count), seed);
  return {v.begin(), v.end()};
}

// N, C, H, W, O, KH, KW, stride_h, stride_w, pad_h, pad_w
Conv2dGeometry geometry(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                        std::int64_t o, std::int64_t kh, std::int64_t kw, std::int64_t sh,
                        std::int64_t sw, std::int64_t ph, std::int64_t pw) {
  return {n, c, h, w, o, kh, kw, sh, sw, ph, pw};
}

const Conv2dGeometry kGeometries[] = {
    geometry(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1),  // odd, non-square input, "same" padding
    geometry(1, 2, 8, 6, 3, 3, 3, 2, 2, 1, 1),  // batch 1 (GEMM-parallel path), stride 2
    geometry(3, 4, 5, 5, 2, 1, 1, 1, 1, 0, 0),  // pointwise: no im2col
    geometry(2, 3, 6, 9, 5, 1, 1, 2, 2, 0, 0),  // 1x1 but strided: im2col path
    geometry(5, 2, 9, 7, 3, 5, 3, 2, 1, 2, 1),  // non-square kernel, mixed strides and padding
    geometry(4, 3, 4, 4, 2, 3, 3, 1, 1, 2, 2),  // padding larger than "same"
    geometry(2, 3, 5, 4, 2, 2, 2, 3, 3, 0, 1),  // stride larger than the kernel
    geometry(3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0),  // scalar images
    geometry(2, 1, 3, 3, 2, 3, 3, 1, 1, 0, 0),  // kernel covers the whole image
    // "Same" padding wider than the image (a 1-D signal stored as 1 x W or H x 1): rows, then
    // columns, of padding beyond the input (the im2col row bound once ran past its block).
    geometry(1, 1, 1, 6, 2, 5, 5, 1, 1, 2, 2),
    geometry(2, 2, 2, 1, 3, 7, 7, 1, 1, 3, 3),
    // Large enough for the batch-parallel plan (see kMinParallelMacs in conv2d.cc):
    geometry(6, 8, 12, 10, 16, 3, 3, 1, 1, 1, 1),
    geometry(5, 8, 17, 15, 12, 3, 3, 2, 2, 1, 1),
    geometry(4, 32, 10, 10, 24, 1, 1, 1, 1, 0, 0),
    // Same/stride-1 shapes for the direct kernel (conv2d_direct.h): channel counts that leave
    // a partial register tile in both directions, rows of several tiles plus a narrower one,
    // a one-row image, a 5x3 kernel, and the CIFAR ResNet's last stage (7x7: GEMM path).
    geometry(3, 5, 9, 37, 20, 5, 3, 1, 1, 2, 1),
    geometry(2, 9, 1, 3, 9, 3, 3, 1, 1, 1, 1),
    geometry(4, 16, 7, 7, 64, 3, 3, 1, 1, 1, 1),
    geometry(11, 3, 6, 5, 5, 3, 3, 1, 1, 1, 1),  // more images than one weight-gradient pass
    geometry(3, 4, 2, 10, 9, 3, 3, 1, 1, 1, 1),  // rows end in a 2-vector tile
    geometry(2, 6, 4, 11, 8, 3, 3, 1, 1, 1, 1),  // a full tile, then a 1-vector tile
    geometry(2, 75, 40, 40, 1, 3, 3, 1, 1, 1, 1),  // one image per weight-gradient pass
    // ResNet-20's first stage on Fashion-MNIST, where training uses the direct kernels.
    geometry(6, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1),
};

class DenseConv2d : public ::testing::TestWithParam<Conv2dGeometry> {};

template <class T>
void expect_kernels_match_reference(const Conv2dGeometry& g, double tol) {
  const auto x = random_vector<T>(g.input_numel(), 1);
  const auto w = random_vector<T>(g.weight_numel(), 2);
  const auto b = random_vector<T>(g.out_channels, 3);
  const auto dy = random_vector<T>(g.output_numel(), 4);
  // Sentinel-filled outputs catch both unwritten elements and accumulation into old values.
  std::vector<T> y(g.output_numel(), T(9)), y_no_bias(g.output_numel(), T(9));
  std::vector<T> dx(g.input_numel(), T(9)), dw(g.weight_numel(), T(9)), db(g.out_channels, T(9));
  conv2d_forward<T>(g, x.data(), w.data(), b.data(), y.data());
  conv2d_forward<T>(g, x.data(), w.data(), nullptr, y_no_bias.data());
  conv2d_backward_data<T>(g, w.data(), dy.data(), dx.data());
  conv2d_backward_weight<T>(g, x.data(), dy.data(), dw.data());
  conv2d_backward_bias<T>(g, dy.data(), db.data());
  EXPECT_TRUE(ref::all_close(y, ref::conv2d_forward(g, x.data(), w.data(), b.data()), tol, tol));
  EXPECT_TRUE(
      ref::all_close(y_no_bias, ref::conv2d_forward<T>(g, x.data(), w.data(), nullptr), tol, tol));
  EXPECT_TRUE(ref::all_close(dx, ref::conv2d_backward_data(g, w.data(), dy.data()), tol, tol));
  EXPECT_TRUE(ref::all_close(dw, ref::conv2d_backward_weight(g, x.data(), dy.data()), tol, tol));
  EXPECT_TRUE(ref::all_close(db, ref::conv2d_backward_bias(g, dy.data()), tol, tol));
}

TEST_P(DenseConv2d, MatchesNaiveReference) {
  const Conv2dGeometry g = GetParam();
  ASSERT_NO_THROW(g.validate());
  {
    SCOPED_TRACE("float");
    expect_kernels_match_reference<float>(g, 1e-4);
  }
  {
    SCOPED_TRACE("double");
    expect_kernels_match_reference<double>(g, 1e-11);
  }
}

// The direct kernel on its own, whatever conv2d_forward would choose for the geometry, so odd
// shapes (partial channel tiles, one-row images, non-square kernels) are covered.
TEST_P(DenseConv2d, DirectKernelMatchesNaiveReference) {
  const Conv2dGeometry g = GetParam();
  if (!g.is_same_stride1()) GTEST_SKIP() << "not a same/stride-1 convolution";
  const auto x = random_vector<float>(g.input_numel(), 1);
  const auto w = random_vector<float>(g.weight_numel(), 2);
  const auto b = random_vector<float>(g.out_channels, 3);
  const auto dy = random_vector<float>(g.output_numel(), 4);
  const detail::DirectConv2d forward(g, w.data(), /*transposed=*/false);
  const detail::DirectConv2d backward(g, w.data(), /*transposed=*/true);
  // Exact-size scratch (so AddressSanitizer sees any overrun), refilled with NaN before every
  // image: any padding a kernel forgot to clear would reach the results.
  auto nan_scratch = [](std::int64_t floats) {
    return std::vector<float>(static_cast<std::size_t>(floats),
                              std::numeric_limits<float>::quiet_NaN());
  };
  std::vector<float> y(g.output_numel(), 9.0F), dx(g.input_numel(), 9.0F);
  const std::int64_t in_image = g.in_channels * g.height * g.width;
  const std::int64_t out_image = g.out_channels * g.out_height() * g.out_width();
  for (std::int64_t n = 0; n < g.batch; ++n) {
    auto forward_scratch = nan_scratch(forward.scratch_floats());
    auto backward_scratch = nan_scratch(backward.scratch_floats());
    forward.run(x.data() + n * in_image, b.data(), y.data() + n * out_image,
                forward_scratch.data());
    backward.run(dy.data() + n * out_image, nullptr, dx.data() + n * in_image,
                 backward_scratch.data());
  }
  EXPECT_TRUE(ref::all_close(y, ref::conv2d_forward(g, x.data(), w.data(), b.data()), 1e-4, 1e-4));
  EXPECT_TRUE(ref::all_close(dx, ref::conv2d_backward_data(g, w.data(), dy.data()), 1e-4, 1e-4));

  // The weight gradient adds to dw, over passes of several images each.
  const detail::DirectConv2dWeightGrad weight_grad(g);
  auto grad_scratch = nan_scratch(weight_grad.scratch_floats());
  std::vector<float> dw(g.weight_numel(), 0.5F);
  weight_grad.accumulate(x.data(), dy.data(), g.batch, dw.data(), grad_scratch.data());
  auto expected_dw = ref::conv2d_backward_weight(g, x.data(), dy.data());
  for (auto& value : expected_dw) value += 0.5F;
  EXPECT_TRUE(ref::all_close(dw, expected_dw, 1e-4, 1e-4));
}

TEST_P(DenseConv2d, MatchesNaiveReferenceOnOneToThreeThreads) {
  // Covers both batch plans (split over images when N >= threads, image by image otherwise)
  // and uneven splits of the batch.
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    expect_kernels_match_reference<double>(GetParam(), 1e-11);
    expect_kernels_match_reference<float>(GetParam(), 1e-4);  // the direct kernels are float
  }
  omp_set_num_threads(saved);
}

TEST_P(DenseConv2d, WeightGradientIsTheSameBitForBitWhenRepeated) {
  // Threads take chunks of the batch in whatever order they finish; the chunks' partial sums
  // must still be added in one fixed order.
  const Conv2dGeometry g = GetParam();
  const auto x = random_vector<float>(g.input_numel(), 1);
  const auto dy = random_vector<float>(g.output_numel(), 4);
  const int saved = omp_get_max_threads();
  for (int threads : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    std::vector<float> first(g.weight_numel());
    conv2d_backward_weight<float>(g, x.data(), dy.data(), first.data());
    for (int repeat = 0; repeat < 5; ++repeat) {
      std::vector<float> again(g.weight_numel());
      conv2d_backward_weight<float>(g, x.data(), dy.data(), again.data());
      ASSERT_EQ(again, first);
    }
  }
  omp_set_num_threads(saved);
}

TEST_P(DenseConv2d, GradientsMatchFiniteDifferences) {
  Conv2dGeometry g = GetParam();
  g.batch = std::min<std::int64_t>(g.batch, 2);  // keeps the central differences cheap
  if (g.input_numel() > 1000) GTEST_SKIP() << "large case: covered by the reference tests";
  auto x = random_values(g.input_numel(), 5);
  auto w = random_values(g.weight_numel(), 6);
  auto b = random_values(g.out_channels, 7);
  const auto dy = random_values(g.output_numel(), 8);
  std::vector<double> y(g.output_numel());
  // loss = sum(dy * conv(x, w) + b), so dL/dy = dy.
  auto loss = [&] {
    conv2d_forward<double>(g, x.data(), w.data(), b.data(), y.data());
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += dy[i] * y[i];
    return sum;
  };
  std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
  conv2d_backward_data<double>(g, w.data(), dy.data(), dx.data());
  conv2d_backward_weight<double>(g, x.data(), dy.data(), dw.data());
  conv2d_backward_bias<double>(g, dy.data(), db.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x))) << "dx";
  EXPECT_TRUE(gradients_close(dw, numeric_gradient(loss, w))) << "dw";
  EXPECT_TRUE(gradients_close(db, numeric_gradient(loss, b))) << "db";
}

INSTANTIATE_TEST_SUITE_P(Geometries, DenseConv2d, ::testing::ValuesIn(kGeometries),
                         [](const ::testing::TestParamInfo<Conv2dGeometry>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(DenseConv2dGeometry, OutputSizeAndValidation) {
  const Conv2dGeometry g = geometry(1, 3, 28, 28, 8, 3, 3, 2, 2, 1, 1);
  EXPECT_EQ(g.out_height(), 14);
  EXPECT_EQ(g.out_width(), 14);
  EXPECT_FALSE(g.is_pointwise());
  EXPECT_TRUE(geometry(1, 3, 5, 5, 8, 1, 1, 1, 1, 0, 0).is_pointwise());
  EXPECT_THROW(geometry(1, 3, 2, 2, 8, 5, 5, 1, 1, 1, 1).validate(), InternalError);
  EXPECT_THROW(geometry(1, 3, 5, 5, 8, 3, 3, 0, 1, 0, 0).validate(), InternalError);
  EXPECT_THROW(geometry(1, 0, 5, 5, 8, 3, 3, 1, 1, 0, 0).validate(), InternalError);
  EXPECT_THROW(geometry(1, 3, 5, 5, 8, 3, 3, 1, 1, -1, 0).validate(), InternalError);
}

TEST(DenseConv2dGeometry, EmptyBatchGivesZeroWeightGradient) {
  const Conv2dGeometry g = geometry(0, 2, 4, 4, 3, 3, 3, 1, 1, 1, 1);
  std::vector<float> w(g.weight_numel(), 1.0f), dw(g.weight_numel(), 5.0f), db(3, 5.0f);
  conv2d_forward<float>(g, nullptr, w.data(), nullptr, nullptr);
  conv2d_backward_weight<float>(g, nullptr, nullptr, dw.data());
  conv2d_backward_bias<float>(g, nullptr, db.data());
  EXPECT_EQ(dw, std::vector<float>(g.weight_numel(), 0.0f));
  EXPECT_EQ(db, std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace aiacc::kernels
