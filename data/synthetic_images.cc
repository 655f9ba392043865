// Synthetic image generation: smooth class prototypes (so convolutions and pooling see
// structure, not white noise) plus per-example noise, all derived from the seed.
#include "data/synthetic_images.h"

#include <cmath>

#include "core/check.h"
#include "core/util/random.h"

namespace aiacc::data {
namespace {

constexpr int kWaves = 3;  // plane waves per prototype channel: enough to make classes distinct
constexpr std::uint64_t kPrototypeStream = 0x70726f746f;  // "proto"

}  // namespace

SyntheticImages::SyntheticImages(const Options& options, const DatasetContext& context)
    : options_(options) {
  check_split(context, "synthetic_images");
  // Prototypes depend on the seed only, so the train and test splits pose the same task.
  example_seed_ = mix64(context.seed ^ (context.split == "train" ? 0x747261696eull : 0x74657374ull));
  const std::int64_t c = options.channels, h = options.height, w = options.width;
  prototypes_.resize(static_cast<std::size_t>(options.num_classes * c * h * w));
  float* out = prototypes_.data();
  for (std::int64_t k = 0; k < options.num_classes; ++k) {
    Rng rng(context.seed, kPrototypeStream + static_cast<std::uint64_t>(k));
    for (std::int64_t ch = 0; ch < c; ++ch) {
      double fy[kWaves], fx[kWaves], phase[kWaves];
      for (int i = 0; i < kWaves; ++i) {
        // Up to ~3 periods across the image: low frequencies survive pooling.
        fy[i] = rng.uniform(-3.0, 3.0) * 6.283185307179586 / static_cast<double>(h);
        fx[i] = rng.uniform(-3.0, 3.0) * 6.283185307179586 / static_cast<double>(w);
        phase[i] = rng.uniform(0.0, 6.283185307179586);
      }
      for (std::int64_t y = 0; y < h; ++y) {
        for (std::int64_t x = 0; x < w; ++x) {
          double value = 0;
          for (int i = 0; i < kWaves; ++i) {
            value += std::sin(fy[i] * static_cast<double>(y) + fx[i] * static_cast<double>(x) + phase[i]);
          }
          *out++ = static_cast<float>(value / std::sqrt(static_cast<double>(kWaves)));
        }
      }
    }
  }
}

InputSpec SyntheticImages::spec() const {
  InputSpec spec;
  spec.task = Task::classification;
  spec.example_shape = Shape{options_.channels, options_.height, options_.width};
  spec.num_classes = options_.num_classes;
  return spec;
}

std::int64_t SyntheticImages::label(std::int64_t index) const {
  return static_cast<std::int64_t>(mix64(example_seed_ + static_cast<std::uint64_t>(index)) %
                                    static_cast<std::uint64_t>(options_.num_classes));
}

void SyntheticImages::read(std::span<const std::int64_t> indices, Batch& batch) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t numel = options_.channels * options_.height * options_.width;
  batch.inputs = Tensor::empty(Shape{n, options_.channels, options_.height, options_.width});
  batch.labels = Tensor::empty(Shape{n}, DType::i64);
  batch.sparse.clear();
  float* out = batch.inputs.data<float>();
  std::int64_t* labels = batch.labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t index = indices[static_cast<std::size_t>(i)];
    AIACC_CHECK(index >= 0 && index < options_.size, "example index {} of {}", index, options_.size);
    const std::int64_t label = this->label(index);
    labels[i] = label;
    const float* prototype = prototypes_.data() + label * numel;
    Rng rng(example_seed_, static_cast<std::uint64_t>(index));
    for (std::int64_t p = 0; p < numel; ++p) {
      *out++ = prototype[p] + static_cast<float>(options_.noise * rng.normal());
    }
  }
}

AIACC_REGISTER_DATASET("synthetic_images", SyntheticImages);

}  // namespace aiacc::data
