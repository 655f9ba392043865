// Augmentation: flip against a naive mirror, crop against the padded-image definition, and the
// batch augmenter's determinism (by seed, epoch and example index only).
#include "data/augment.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace aiacc::data {
namespace {

constexpr std::int64_t C = 2, H = 5, W = 4;

std::vector<float> ramp(float start = 1.0f) {
  std::vector<float> v(C * H * W);
  std::iota(v.begin(), v.end(), start);
  return v;
}
float at(const std::vector<float>& image, std::int64_t c, std::int64_t y, std::int64_t x) {
  return image[static_cast<std::size_t>((c * H + y) * W + x)];
}

TEST(Augment, FlipIsAnExactMirror) {
  auto image = ramp();
  const auto original = image;
  flip_horizontal(image.data(), C, H, W);
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x) EXPECT_EQ(at(image, c, y, x), at(original, c, y, W - 1 - x));
  flip_horizontal(image.data(), C, H, W);
  EXPECT_EQ(image, original);
}

TEST(Augment, CropOfPaddedImageShiftsAndZeroFillsBorders) {
  const std::int64_t pad = 2;
  std::vector<float> scratch;
  for (std::int64_t top = 0; top <= 2 * pad; ++top) {
    for (std::int64_t left = 0; left <= 2 * pad; ++left) {
      auto image = ramp();
      crop_padded(image.data(), C, H, W, pad, top, left, scratch);
      ASSERT_EQ(image.size(), static_cast<std::size_t>(C * H * W));
      // Reference: build the padded image explicitly and cut the window out of it.
      const std::int64_t ph = H + 2 * pad, pw = W + 2 * pad;
      std::vector<float> padded(static_cast<std::size_t>(C * ph * pw), 0.0f);
      const auto original = ramp();
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t y = 0; y < H; ++y)
          for (std::int64_t x = 0; x < W; ++x) padded[static_cast<std::size_t>((c * ph + y + pad) * pw + x + pad)] = at(original, c, y, x);
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t y = 0; y < H; ++y)
          for (std::int64_t x = 0; x < W; ++x)
            EXPECT_EQ(at(image, c, y, x), padded[static_cast<std::size_t>((c * ph + y + top) * pw + x + left)])
                << "offset " << top << "," << left;
    }
  }
  // The corner offset puts `pad` zero rows on top and zero columns on the left.
  auto image = ramp();
  crop_padded(image.data(), C, H, W, pad, 0, 0, scratch);
  for (std::int64_t c = 0; c < C; ++c) {
    for (std::int64_t i = 0; i < pad; ++i) {
      for (std::int64_t x = 0; x < W; ++x) EXPECT_EQ(at(image, c, i, x), 0.0f);
      for (std::int64_t y = 0; y < H; ++y) EXPECT_EQ(at(image, c, y, i), 0.0f);
    }
    EXPECT_EQ(at(image, c, pad, pad), at(ramp(), c, 0, 0));
  }
  // The centre offset is the identity.
  image = ramp();
  crop_padded(image.data(), C, H, W, pad, pad, pad, scratch);
  EXPECT_EQ(image, ramp());
  EXPECT_THROW(crop_padded(image.data(), C, H, W, pad, 5, 0, scratch), InternalError);
}

Tensor batch_of(std::int64_t n) {
  Tensor t = Tensor::empty(Shape{n, C, H, W});
  for (std::int64_t i = 0; i < n; ++i) {
    auto image = ramp(static_cast<float>(i * 100 + 1));
    std::copy(image.begin(), image.end(), t.data<float>() + i * C * H * W);
  }
  return t;
}
std::vector<float> image_of(const Tensor& t, std::int64_t i) {
  const float* p = t.data<float>() + i * C * H * W;
  return {p, p + C * H * W};
}

TEST(Augment, BatchFlipsAboutHalfAndDependsOnlyOnSeedEpochAndExample) {
  const std::int64_t n = 200;
  std::vector<std::int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 1000);
  AugmentOptions options;
  options.horizontal_flip = true;
  Tensor a = batch_of(n);
  augment_batch(a, ids, options, 5, 0);
  int flipped = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    auto original = image_of(batch_of(n), i), mirrored = original;
    flip_horizontal(mirrored.data(), C, H, W);
    auto got = image_of(a, i);
    EXPECT_TRUE(got == original || got == mirrored);
    flipped += got == mirrored;
  }
  EXPECT_GT(flipped, 70);
  EXPECT_LT(flipped, 130);

  // Example 1005 alone in a batch is augmented as it was at row 5 of the big batch.
  options.random_crop_padding = 2;
  Tensor big = batch_of(n), single = Tensor::empty(Shape{1, C, H, W});
  single.copy_from(big.rows(5, 6).clone());
  augment_batch(big, ids, options, 5, 0);
  std::vector<std::int64_t> one = {1005};
  augment_batch(single, one, options, 5, 0);
  EXPECT_EQ(image_of(single, 0), image_of(big, 5));

  // Another epoch draws differently for at least some examples.
  Tensor other = batch_of(n);
  augment_batch(other, ids, options, 5, 1);
  EXPECT_NE(other.to_vector<float>(), big.to_vector<float>());
}

TEST(Augment, DisabledIsANoOpAndRankIsChecked) {
  Tensor t = batch_of(3);
  auto before = t.to_vector<float>();
  std::vector<std::int64_t> ids = {0, 1, 2};
  augment_batch(t, ids, AugmentOptions{}, 1, 0);
  EXPECT_EQ(t.to_vector<float>(), before);
  AugmentOptions flip;
  flip.horizontal_flip = true;
  Tensor flat = Tensor::zeros(Shape{3, 4});
  EXPECT_THROW(augment_batch(flat, ids, flip, 1, 0), InternalError);
}

}  // namespace
}  // namespace aiacc::data
