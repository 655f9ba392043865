// Helpers shared by the ResNet tests: building a network for an image shape directly (without
// a job config) and random float64 batches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/batch.h"
#include "models/resnet.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models::testing {

inline ResNet::Options resnet_options(std::int64_t depth, std::int64_t width = 0) {
  ResNet::Options options;
  options.depth = depth;
  options.width = width;
  return options;
}

// A ResNet for [channels, height, width] images and `classes` classes.
inline std::unique_ptr<ResNet> make_resnet(const ResNet::Options& options, const Shape& example,
                                           std::int64_t classes, DType dtype = DType::f32,
                                           std::uint64_t seed = 7) {
  ModelContext context;
  context.input.task = Task::classification;
  context.input.example_shape = example;
  context.input.num_classes = classes;
  context.seed = seed;
  context.dtype = dtype;
  return std::make_unique<ResNet>(options, context);
}

// `n` random images of `example` in [-1, 1) (f32 or f64) with labels i % classes.
inline Batch random_batch(std::int64_t n, const Shape& example, std::int64_t classes,
                          DType dtype, std::uint64_t seed) {
  const Shape shape{n, example[0], example[1], example[2]};
  Batch batch;
  batch.inputs = Tensor::from_vector(aiacc::testing::random_values(shape.numel(), seed), shape);
  if (dtype != DType::f64) batch.inputs = batch.inputs.to(dtype);
  std::vector<std::int64_t> labels(n);
  for (std::int64_t i = 0; i < n; ++i) labels[i] = i % classes;
  batch.labels = Tensor::from_vector(labels, Shape{n});
  return batch;
}

inline std::int64_t parameter_count(Model& model) {
  std::int64_t total = 0;
  for (Parameter* p : model.parameters()) total += p->value().numel();
  return total;
}

}  // namespace aiacc::models::testing
