// Augmentation kernels: plain loops over [C, H, W]; cheap next to the model's forward pass.
#include "data/augment.h"

#include <algorithm>

#include "core/check.h"
#include "core/util/random.h"

namespace aiacc::data {

void flip_horizontal(float* image, std::int64_t channels, std::int64_t height, std::int64_t width) {
  for (std::int64_t row = 0; row < channels * height; ++row) {
    float* line = image + row * width;
    std::reverse(line, line + width);
  }
}

void crop_padded(float* image, std::int64_t channels, std::int64_t height, std::int64_t width,
                 std::int64_t padding, std::int64_t top, std::int64_t left, std::vector<float>& scratch) {
  AIACC_CHECK(top >= 0 && top <= 2 * padding && left >= 0 && left <= 2 * padding,
              "crop offset ({}, {}) with padding {}", top, left, padding);
  const std::int64_t plane = height * width;
  scratch.assign(image, image + channels * plane);
  // Output pixel (y, x) is padded pixel (y + top, x + left), i.e. source pixel
  // (y + top - padding, x + left - padding) when that lies inside the image, else zero.
  const std::int64_t dy = top - padding, dx = left - padding;
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* source = scratch.data() + c * plane;
    float* out = image + c * plane;
    for (std::int64_t y = 0; y < height; ++y) {
      const std::int64_t sy = y + dy;
      for (std::int64_t x = 0; x < width; ++x) {
        const std::int64_t sx = x + dx;
        const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
        out[y * width + x] = inside ? source[sy * width + sx] : 0.0f;
      }
    }
  }
}

void augment_batch(const Tensor& inputs, std::span<const std::int64_t> example_ids,
                   const AugmentOptions& options, std::uint64_t seed, std::int64_t epoch) {
  if (!options.enabled()) return;
  AIACC_CHECK_EQ(inputs.rank(), 4, "augmentation needs images [N, C, H, W], got {}", inputs.shape().str());
  AIACC_CHECK_EQ(inputs.dim(0), static_cast<std::int64_t>(example_ids.size()));
  const std::int64_t c = inputs.dim(1), h = inputs.dim(2), w = inputs.dim(3);
  float* data = inputs.data<float>();
  std::vector<float> scratch;
  // One stream per (epoch, example): mixing the epoch into the seed keeps streams of different
  // epochs unrelated while the example index selects the stream.
  const std::uint64_t epoch_seed = mix64(seed ^ mix64(static_cast<std::uint64_t>(epoch) + 0x61756731ull));
  for (std::size_t i = 0; i < example_ids.size(); ++i) {
    Rng rng(epoch_seed, static_cast<std::uint64_t>(example_ids[i]));
    float* image = data + static_cast<std::int64_t>(i) * c * h * w;
    if (options.random_crop_padding > 0) {
      const auto offsets = static_cast<std::uint64_t>(2 * options.random_crop_padding + 1);
      const auto top = static_cast<std::int64_t>(rng.below(offsets));
      const auto left = static_cast<std::int64_t>(rng.below(offsets));
      crop_padded(image, c, h, w, options.random_crop_padding, top, left, scratch);
    }
    if (options.horizontal_flip && rng.uniform() < 0.5) flip_horizontal(image, c, h, w);
  }
}

}  // namespace aiacc::data
