// synthetic_images: deterministic from the seed, splits differ but share the task, and the task
// is learnable (a nearest-class-mean classifier fitted on train scores well on test).
#include "data/synthetic_images.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace aiacc::data {
namespace {

SyntheticImages::Options small() {
  SyntheticImages::Options options;
  options.channels = 2;
  options.height = 8;
  options.width = 6;
  options.num_classes = 4;
  options.size = 400;
  options.noise = 0.5;
  return options;
}

Batch read_all(SyntheticImages& dataset) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(dataset.size()));
  std::iota(all.begin(), all.end(), 0);
  Batch batch;
  dataset.read(all, batch);
  return batch;
}

TEST(SyntheticImages, SpecAndDeterminism) {
  SyntheticImages a(small(), {"train", 7}), b(small(), {"train", 7}), other(small(), {"train", 8});
  EXPECT_EQ(a.spec().example_shape, (Shape{2, 8, 6}));
  EXPECT_EQ(a.spec().num_classes, 4);
  EXPECT_EQ(a.size(), 400);
  Batch x = read_all(a), y = read_all(b), z = read_all(other);
  EXPECT_EQ(x.inputs.to_vector<float>(), y.inputs.to_vector<float>());
  EXPECT_EQ(x.labels.to_vector<std::int64_t>(), y.labels.to_vector<std::int64_t>());
  EXPECT_NE(x.inputs.to_vector<float>(), z.inputs.to_vector<float>());

  // An example does not depend on the batch it is read in.
  Batch single;
  std::vector<std::int64_t> one = {123};
  a.read(one, single);
  auto all = x.inputs.to_vector<float>();
  std::vector<float> expected(all.begin() + 123 * 96, all.begin() + 124 * 96);
  EXPECT_EQ(single.inputs.to_vector<float>(), expected);
  EXPECT_EQ(single.labels.to_vector<std::int64_t>()[0], a.label(123));

  // Every class occurs.
  std::vector<int> per_class(4, 0);
  for (auto label : x.labels.span<std::int64_t>()) ++per_class[static_cast<std::size_t>(label)];
  for (int count : per_class) EXPECT_GT(count, 50);
}

TEST(SyntheticImages, SplitsDifferButShareTheLearnableTask) {
  SyntheticImages train(small(), {"train", 3}), test(small(), {"test", 3});
  Batch a = read_all(train), b = read_all(test);
  EXPECT_NE(a.inputs.to_vector<float>(), b.inputs.to_vector<float>());

  const std::size_t dim = 96;
  std::vector<double> means(4 * dim, 0.0);
  std::vector<int> counts(4, 0);
  const float* x = a.inputs.data<float>();
  for (std::size_t i = 0; i < 400; ++i) {
    const auto label = static_cast<std::size_t>(a.labels.data<std::int64_t>()[i]);
    ++counts[label];
    for (std::size_t p = 0; p < dim; ++p) means[label * dim + p] += x[i * dim + p];
  }
  for (std::size_t k = 0; k < 4; ++k) {
    for (std::size_t p = 0; p < dim; ++p) means[k * dim + p] /= counts[k];
  }
  int correct = 0;
  const float* t = b.inputs.data<float>();
  for (std::size_t i = 0; i < 400; ++i) {
    std::size_t best = 0;
    double best_distance = 1e300;
    for (std::size_t k = 0; k < 4; ++k) {
      double distance = 0;
      for (std::size_t p = 0; p < dim; ++p) distance += std::pow(t[i * dim + p] - means[k * dim + p], 2);
      if (distance < best_distance) best_distance = distance, best = k;
    }
    correct += static_cast<std::int64_t>(best) == b.labels.data<std::int64_t>()[i];
  }
  EXPECT_GT(correct, 380) << "the classes should be separable at noise 0.5";
}

TEST(SyntheticImages, RejectsUnknownSplitAndBadIndex) {
  EXPECT_THROW(SyntheticImages(small(), {"validation", 0}), ConfigError);
  SyntheticImages dataset(small(), {"train", 0});
  Batch batch;
  std::vector<std::int64_t> bad = {400};
  EXPECT_THROW(dataset.read(bad, batch), InternalError);
}

}  // namespace
}  // namespace aiacc::data
