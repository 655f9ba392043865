// `synthetic_images`: deterministic images with a learnable structure, for tests and benchmarks.
// Each class has a smooth prototype pattern (a sum of random plane waves, fixed by the seed);
// an example is its class's prototype plus near-Gaussian noise, generated on demand from
// (seed, split, example index), so any size costs no memory and the splits share one task.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace aiacc::data {

class SyntheticImages final : public Dataset {
 public:
  struct Options {
    std::int64_t channels = 1;
    std::int64_t height = 28;
    std::int64_t width = 28;
    std::int64_t num_classes = 10;
    std::int64_t size = 1024;
    double noise = 0.5;

    template <class V>
    void visit(V& v) {
      v.field("channels", channels, "channels per image", config::in_range<std::int64_t>(1, 64));
      v.field("height", height, "image height in pixels", config::in_range<std::int64_t>(1, 4096));
      v.field("width", width, "image width in pixels", config::in_range<std::int64_t>(1, 4096));
      v.field("num_classes", num_classes, "number of classes (one prototype each)",
              config::in_range<std::int64_t>(1, 100000));
      v.field("size", size, "examples in the split", config::at_least<std::int64_t>(1));
      v.field("noise", noise, "std of the Gaussian noise added to the prototype (prototypes have "
              "unit amplitude)", config::at_least(0.0));
    }
  };

  // Builds the class prototypes from context.seed. ConfigError for an unknown split.
  SyntheticImages(const Options& options, const DatasetContext& context);

  InputSpec spec() const override;
  std::int64_t size() const override { return options_.size; }
  // Thread-safe (prototypes are immutable; each example draws from its own Rng).
  void read(std::span<const std::int64_t> indices, Batch& batch) override;

  // The label of example `index` (what read() puts in labels).
  std::int64_t label(std::int64_t index) const;

 private:
  void write_example(std::int64_t index, float* out) const;  // prototype plus noise

  Options options_;
  std::uint64_t example_seed_;     // differs between splits
  std::vector<float> prototypes_;  // [num_classes, C, H, W]
};

}  // namespace aiacc::data
