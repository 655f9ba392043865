// Synthetic image generation: smooth class prototypes (so convolutions and pooling see
// structure, not white noise) plus per-example noise, all derived from the seed.
#include "data/synthetic_images.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <vector>

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
  // sin(fy*y + phase + fx*x) = sin(fy*y + phase) cos(fx*x) + cos(fy*y + phase) sin(fx*x): per-row
  // and per-column tables turn three sines per pixel into six multiply-adds (ImageNet-sized
  // prototypes of 1000 classes took seconds to build with a sine per pixel and wave).
  std::vector<double> row_sin(static_cast<std::size_t>(kWaves * h)), row_cos(row_sin.size());
  std::vector<double> col_sin(static_cast<std::size_t>(kWaves * w)), col_cos(col_sin.size());
  std::vector<double> row(static_cast<std::size_t>(w));
  const double scale = 1.0 / std::sqrt(static_cast<double>(kWaves));
  for (std::int64_t k = 0; k < options.num_classes; ++k) {
    Rng rng(context.seed, kPrototypeStream + static_cast<std::uint64_t>(k));
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (int i = 0; i < kWaves; ++i) {
        // Up to ~3 periods across the image: low frequencies survive pooling.
        const double fy = rng.uniform(-3.0, 3.0) * 6.283185307179586 / static_cast<double>(h);
        const double fx = rng.uniform(-3.0, 3.0) * 6.283185307179586 / static_cast<double>(w);
        const double phase = rng.uniform(0.0, 6.283185307179586);
        for (std::int64_t y = 0; y < h; ++y) {
          row_sin[static_cast<std::size_t>(i * h + y)] = std::sin(fy * static_cast<double>(y) + phase);
          row_cos[static_cast<std::size_t>(i * h + y)] = std::cos(fy * static_cast<double>(y) + phase);
        }
        for (std::int64_t x = 0; x < w; ++x) {
          col_sin[static_cast<std::size_t>(i * w + x)] = std::sin(fx * static_cast<double>(x));
          col_cos[static_cast<std::size_t>(i * w + x)] = std::cos(fx * static_cast<double>(x));
        }
      }
      for (std::int64_t y = 0; y < h; ++y) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int i = 0; i < kWaves; ++i) {
          const double sy = row_sin[static_cast<std::size_t>(i * h + y)];
          const double cy = row_cos[static_cast<std::size_t>(i * h + y)];
          const double* cs = col_sin.data() + i * w;
          const double* cc = col_cos.data() + i * w;
          for (std::int64_t x = 0; x < w; ++x) row[static_cast<std::size_t>(x)] += sy * cc[x] + cy * cs[x];
        }
        for (std::int64_t x = 0; x < w; ++x) *out++ = static_cast<float>(row[static_cast<std::size_t>(x)] * scale);
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

void SyntheticImages::write_example(std::int64_t index, float* out) const {
  AIACC_CHECK(index >= 0 && index < options_.size, "example index {} of {}", index, options_.size);
  const std::int64_t numel = options_.channels * options_.height * options_.width;
  const float* prototype = prototypes_.data() + label(index) * numel;
  // The noise is the Irwin-Hall sum of the four 16-bit quarters of one draw: mean 2 and
  // variance 4/12 before the shift and scale, so near-Gaussian (bounded at 3.46 std) for one
  // generator step per pixel. Box-Muller's log, sqrt and cos per pixel made a batch of 256
  // ImageNet-sized examples take 2 s, slower than a GPU trains on it.
  const float scale = static_cast<float>(options_.noise * std::sqrt(3.0) / 65536.0);
  const float shift = 2.0f * 65536.0f - 2.0f * 1.0f;  // minus the quarters' 0.5/65536 bias each
  Rng rng(example_seed_, static_cast<std::uint64_t>(index));
  for (std::int64_t p = 0; p < numel; ++p) {
    const std::uint64_t u = rng.next();
    const auto sum = static_cast<float>((u & 0xffff) + ((u >> 16) & 0xffff) + ((u >> 32) & 0xffff) + (u >> 48));
    out[p] = prototype[p] + (sum - shift) * scale;
  }
}

void SyntheticImages::read(std::span<const std::int64_t> indices, Batch& batch) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t numel = options_.channels * options_.height * options_.width;
  batch.inputs = Tensor::empty(Shape{n, options_.channels, options_.height, options_.width});
  batch.labels = Tensor::empty(Shape{n}, DType::i64);
  batch.sparse.clear();
  float* out = batch.inputs.data<float>();
  std::int64_t* labels = batch.labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) labels[i] = label(indices[static_cast<std::size_t>(i)]);
  // Examples are independent: large batches are written by a few threads (a GPU consumes a
  // batch of 256 ImageNet-sized images in about 0.1 s; one thread writes it in about as long).
  constexpr std::int64_t kElementsPerThread = 4 << 20;
  const std::int64_t threads = std::clamp<std::int64_t>(n * numel / kElementsPerThread, 1, std::min<std::int64_t>(n, 8));
  auto write_range = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) write_example(indices[static_cast<std::size_t>(i)], out + i * numel);
  };
  if (threads == 1) {
    write_range(0, n);
    return;
  }
  std::vector<std::future<void>> parts;
  for (std::int64_t t = 1; t < threads; ++t) {
    parts.push_back(std::async(std::launch::async, write_range, n * t / threads, n * (t + 1) / threads));
  }
  write_range(0, n / threads);
  for (auto& part : parts) part.get();  // rethrows a part's error (a bad index)
}

AIACC_REGISTER_DATASET("synthetic_images", SyntheticImages);

}  // namespace aiacc::data
