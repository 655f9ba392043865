// Training-time image augmentation: random crop of the zero-padded image and horizontal flip.
// Each example's choices are drawn from (seed, epoch, example index), so they do not depend on
// the rank, the world size, the batch an example lands in or thread timing.
// Shapes: N = batch, C = channels, H = height, W = width; images are [C, H, W] row-major.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/config/schema.h"
#include "core/tensor.h"

namespace aiacc::data {

struct AugmentOptions {
  std::int64_t random_crop_padding = 0;
  bool horizontal_flip = false;

  template <class V>
  void visit(V& v) {
    v.field("random_crop_padding", random_crop_padding,
            "pad each side by this many zero pixels, then crop back to the original size at a "
            "random offset (0: off; 4 is the usual choice for 28x28 and 32x32 images)",
            config::in_range<std::int64_t>(0, 64));
    v.field("horizontal_flip", horizontal_flip, "mirror each training image left-right with probability 1/2");
  }
  bool enabled() const { return random_crop_padding > 0 || horizontal_flip; }
};

// Mirrors one image [C, H, W] left-right in place.
void flip_horizontal(float* image, std::int64_t channels, std::int64_t height, std::int64_t width);

// Replaces one image [C, H, W] by the H x W window at (top, left) of the image padded with
// `padding` zeros on every side; top and left lie in [0, 2 * padding] (padding, padding is the
// identity). `scratch` is reused storage. Zero is the normalised value, i.e. the dataset mean.
void crop_padded(float* image, std::int64_t channels, std::int64_t height, std::int64_t width,
                 std::int64_t padding, std::int64_t top, std::int64_t left, std::vector<float>& scratch);

// Augments a batch of images `inputs` [N, C, H, W] f32 in place; example_ids[i] is the dataset
// index of row i. Throws InternalError unless inputs is rank 4 with N == example_ids.size().
void augment_batch(const Tensor& inputs, std::span<const std::int64_t> example_ids,
                   const AugmentOptions& options, std::uint64_t seed, std::int64_t epoch);

}  // namespace aiacc::data
