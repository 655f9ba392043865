// Wide&Deep on a real GPU with its deep tables' bags pooled there (embedding_bags: device) and
// on the host: over 40 steps of multi-hot batches whose unique rows vary from step to step, the
// loss, the outputs and every table's gradient rows and every dense gradient agree with the
// same model on the CPU within fp32 GEMM rounding, and once the first steps have warmed the
// caching allocator no step asks CUDA for memory, although each step's blocks differ in size.
// Skipped (exit 77) without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "core/config/node.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/device_ops.h"
#include "core/cuda/tensor_backend.h"
#include "models/wide_deep_model.h"
#include "tests/models/wide_deep_test_util.h"

namespace aiacc::models {
namespace {

using testing::KeepingFactory;

InputSpec ctr_spec(std::int64_t fields, std::int64_t num_int) {
  InputSpec spec;
  spec.task = Task::binary;
  spec.example_shape = Shape{num_int};
  for (std::int64_t f = 0; f < fields; ++f) spec.sparse_fields.push_back(fmt::format("C{}", f + 1));
  return spec;
}

// N examples; each field's bag holds 0-3 ids drawn from a skewed vocabulary (a few hot ids).
Batch random_batch(std::mt19937_64& rng, std::int64_t n, std::int64_t fields, std::int64_t num_int) {
  std::vector<std::vector<std::vector<std::int64_t>>> bags(static_cast<std::size_t>(fields));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (auto& field : bags) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::vector<std::int64_t> bag(rng() % 4);
      for (auto& id : bag) id = static_cast<std::int64_t>(std::pow(unit(rng), 3.0) * 5000.0);
      field.push_back(std::move(bag));
    }
  }
  std::vector<float> ints(static_cast<std::size_t>(n * num_int)), labels(static_cast<std::size_t>(n));
  for (float& x : ints) x = static_cast<float>(unit(rng) * 2.0 - 1.0);
  for (float& y : labels) y = static_cast<float>(rng() % 2);
  return testing::ctr_batch(bags, ints, num_int, labels);
}

std::unique_ptr<Model> build(const std::string& bags, ModelContext& context) {
  const auto doc = config::Document::from_string(
      "embedding_dim: 16\nhidden: [64, 32]\npooling: mean\nembedding_bags: " + bags + "\n", "model.yaml");
  return model_registry().create("wide_deep", doc.root(), context);
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1e-6, worst = 0.0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

class GpuWideDeep : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuWideDeep, FollowsTheCpuModelAndStopsAllocatingAfterWarmUp) {
  cuda::register_tensor_backend();
  cuda::register_device_ops();
  constexpr std::int64_t kFields = 4, kInts = 3, kBatch = 256, kSteps = 40, kWarmUp = 5;
  KeepingFactory cpu_stores{testing::recording_factory()}, gpu_stores{testing::recording_factory()};
  ModelContext cpu_context{ctr_spec(kFields, kInts), 7, DType::f32, cpu_stores.factory(), {}};
  ModelContext gpu_context{ctr_spec(kFields, kInts), 7, DType::f32, gpu_stores.factory(), {}};
  auto on_cpu = build(GetParam(), cpu_context);
  auto on_gpu = build(GetParam(), gpu_context);
  on_gpu->to(Device::cuda(0));

  std::mt19937_64 rng(3);
  std::int64_t warm_allocations = 0;
  double worst_grad = 0.0, worst_output = 0.0;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    const Batch batch = random_batch(rng, kBatch, kFields, kInts);
    const double cpu_loss = on_cpu->forward(batch, /*training=*/true);
    const double gpu_loss = on_gpu->forward(batch, /*training=*/true);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * (1 + std::abs(cpu_loss))) << "step " << step;
    worst_output = std::max(worst_output, max_relative_difference(on_gpu->outputs().to_vector<float>(),
                                                                  on_cpu->outputs().to_vector<float>()));
    on_cpu->backward();
    on_gpu->backward();
    const std::vector<Parameter*> cpu_params = on_cpu->parameters(), gpu_params = on_gpu->parameters();
    ASSERT_EQ(cpu_params.size(), gpu_params.size());
    for (std::size_t k = 0; k < cpu_params.size(); ++k) {
      Parameter& c = *cpu_params[k];
      Parameter& g = *gpu_params[k];
      if (c.kind() == ParamKind::sparse) {
        ASSERT_EQ(g.sparse_grad().ids, c.sparse_grad().ids) << c.name();
        worst_grad = std::max(worst_grad, max_relative_difference(g.sparse_grad().rows.to_vector<float>(),
                                                                  c.sparse_grad().rows.to_vector<float>()));
        // Both stores move their rows the same way, so the next batches pull equal rows.
        cpu_stores.stores.at(c.name())->push(c.sparse_grad().ids, c.sparse_grad().rows.data<float>(), 0.5);
        gpu_stores.stores.at(g.name())->push(c.sparse_grad().ids, c.sparse_grad().rows.data<float>(), 0.5);
      } else {
        worst_grad = std::max(worst_grad, max_relative_difference(g.grad().to(Device::cpu()).to_vector<float>(),
                                                                  c.grad().to_vector<float>()));
      }
    }
    if (step == kWarmUp) warm_allocations = cuda::device_allocator(0).stats().source_allocations;
  }
  const std::int64_t allocations = cuda::device_allocator(0).stats().source_allocations;
  std::printf("[ gpu      ] bags on the %s: worst relative difference %.2e (gradients), %.2e (outputs); "
              "%lld CUDA allocations by step %lld, %lld by step %lld\n",
              GetParam().c_str(), worst_grad, worst_output, static_cast<long long>(warm_allocations),
              static_cast<long long>(kWarmUp), static_cast<long long>(allocations),
              static_cast<long long>(kSteps));
  EXPECT_LT(worst_grad, 1e-4);
  EXPECT_LT(worst_output, 1e-4);
  EXPECT_EQ(allocations, warm_allocations) << "steps after the warm-up asked CUDA for memory";
}

INSTANTIATE_TEST_SUITE_P(Bags, GpuWideDeep, ::testing::Values("device", "host"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return "On" + info.param; });

}  // namespace
}  // namespace aiacc::models
