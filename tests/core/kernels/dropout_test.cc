// Dropout kernels: reproducible masks (per seed and step, for any thread count), the keep rate,
// inverted scaling, the p = 0 and p = 1 ends, and the gradient through a fixed mask.
#include "core/kernels/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "tests/testing/gradient_check.h"

namespace aiacc::kernels {
namespace {

using aiacc::testing::gradients_close;
using aiacc::testing::numeric_gradient;
using aiacc::testing::random_values;

std::vector<std::uint8_t> mask_of(std::int64_t count, double p, std::uint64_t seed,
                                  std::uint64_t step) {
  std::vector<std::uint8_t> mask(count);
  dropout_mask(count, p, seed, step, mask.data());
  return mask;
}

TEST(DropoutKernel, MaskIsReproducibleAndVariesWithSeedAndStep) {
  const std::int64_t count = 1000003;  // many chunks, odd tail
  const auto mask = mask_of(count, 0.3, 7, 2);
  EXPECT_EQ(mask, mask_of(count, 0.3, 7, 2));
  EXPECT_NE(mask, mask_of(count, 0.3, 7, 3));
  EXPECT_NE(mask, mask_of(count, 0.3, 8, 2));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto serial = mask_of(count, 0.3, 7, 2);
  omp_set_num_threads(saved);
  EXPECT_EQ(mask, serial);
  // Keep rate ~ 1 - p: the binomial standard deviation is ~0.00046, allow ~5 of them.
  double kept = 0;
  for (auto m : mask) kept += m;
  EXPECT_NEAR(kept / count, 0.7, 0.0025);
}

TEST(DropoutKernel, ScalesKeptElementsAndHandlesEnds) {
  const std::vector<double> x = {1, -2, 3, 4};
  const std::vector<std::uint8_t> mask = {1, 0, 1, 0};
  std::vector<double> y(4);
  dropout_apply<double>(4, x.data(), mask.data(), 0.75, y.data());
  EXPECT_EQ(y, (std::vector<double>{4, 0, 12, 0}));
  const auto keep_all = mask_of(1000, 0.0, 1, 0);
  EXPECT_EQ(keep_all, std::vector<std::uint8_t>(1000, 1));
  const auto drop_all = mask_of(1000, 1.0, 1, 0);
  EXPECT_EQ(drop_all, std::vector<std::uint8_t>(1000, 0));
  dropout_apply<double>(4, x.data(), mask.data(), 1.0, y.data());
  EXPECT_EQ(y, std::vector<double>(4, 0.0));
  // In place, float.
  std::vector<float> xf = {2, 2};
  const std::vector<std::uint8_t> m2 = {1, 1};
  dropout_apply<float>(2, xf.data(), m2.data(), 0.5, xf.data());
  EXPECT_EQ(xf, (std::vector<float>{4, 4}));
}

TEST(DropoutKernel, BackwardWithFixedMaskMatchesFiniteDifferences) {
  const std::int64_t count = 17;
  const double p = 0.4;
  const auto mask = mask_of(count, p, 3, 1);
  auto x = random_values(count, 71);
  const auto w = random_values(count, 72);
  std::vector<double> y(count);
  auto loss = [&] {
    dropout_apply<double>(count, x.data(), mask.data(), p, y.data());
    double total = 0;
    for (std::int64_t i = 0; i < count; ++i) total += w[i] * y[i] * y[i];
    return total;
  };
  loss();
  std::vector<double> dy(count), dx(count);
  for (std::int64_t i = 0; i < count; ++i) dy[i] = 2 * w[i] * y[i];
  dropout_apply<double>(count, dy.data(), mask.data(), p, dx.data());
  EXPECT_TRUE(gradients_close(dx, numeric_gradient(loss, x)));
}

}  // namespace
}  // namespace aiacc::kernels
