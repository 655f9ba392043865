// Gradient clipping by global norm against float64 references: the sum of squares over values
// of very different magnitudes, PyTorch's clip factor, and the norm after clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/optim/grad_clip.h"
#include "core/util/random.h"

namespace aiacc::optim {
namespace {

TEST(GradClip, SumOfSquaresMatchesAFloat64Reference) {
  Rng rng(3);
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 1000u, 100003u}) {
    std::vector<float> values(n);
    long double reference = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // Magnitudes from 1e-4 to 1e4: a float accumulator would lose the small ones.
      values[i] = static_cast<float>((rng.uniform() - 0.5) * std::pow(10.0, static_cast<double>(i % 9) - 4.0));
      reference += static_cast<long double>(values[i]) * values[i];
    }
    const double got = sum_of_squares(values);
    EXPECT_NEAR(got, static_cast<double>(reference), 1e-12 * static_cast<double>(reference) + 1e-300) << n;
  }
}

TEST(GradClip, TheFactorIsPyTorchsAndOffAtZero) {
  EXPECT_EQ(clip_factor(10.0, 0.0), 1.0);       // off
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);        // below the bound: unchanged
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(clip_factor(0.0, 1.0), 1.0);        // a zero gradient stays finite
  EXPECT_TRUE(std::isnan(clip_factor(std::nan(""), 1.0)));
}

TEST(GradClip, ScaledByTheFactorTheNormIsTheBound) {
  std::vector<float> a{3.0f, 0.0f}, b{0.0f, 4.0f, 12.0f};  // global norm 13
  const double norm = std::sqrt(sum_of_squares(a) + sum_of_squares(b));
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const double factor = clip_factor(norm, 6.5);
  scale_in_place(a, static_cast<float>(factor));
  scale_in_place(b, static_cast<float>(factor));
  EXPECT_NEAR(std::sqrt(sum_of_squares(a) + sum_of_squares(b)), 6.5, 1e-5);
  EXPECT_NEAR(a[0], 1.5f, 1e-6f);
  EXPECT_NEAR(b[2], 6.0f, 1e-6f);
}

}  // namespace
}  // namespace aiacc::optim
