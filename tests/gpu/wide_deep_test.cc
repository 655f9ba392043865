// Wide&Deep on a real GPU with its deep tables' bags pooled there (embedding_bags: device) and
// on the host: over 40 steps of multi-hot batches whose unique rows vary from step to step, the
// loss, the outputs and every table's gradient rows and every dense gradient agree with the
// same model on the CPU within fp32 GEMM rounding, and once the first steps have warmed the
// caching allocator no step asks CUDA for memory, although each step's blocks differ in size.
// The same with every table on parameter-server shards behind a worker-side hot-row cache that
// the GPU mirrors (device_row_cache).
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
#include "ps/remote_embedding_store.h"
#include "tests/models/wide_deep_test_util.h"
#include "tests/ps/ps_fixture.h"

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

// Trains `on_cpu` and `on_gpu` side by side on the same random batches for `steps` steps; both
// stores of a table are pushed the CPU model's gradient rows, so the next batches pull equal
// rows. Returns the worst relative differences and the CUDA allocations after `warm_up` steps
// and at the end.
struct SideBySide {
  double worst_grad = 0.0, worst_output = 0.0;
  std::int64_t warm_allocations = 0, allocations = 0;
};
SideBySide train_side_by_side(Model& on_cpu, Model& on_gpu, KeepingFactory& cpu_stores, KeepingFactory& gpu_stores,
                              std::int64_t fields, std::int64_t num_int, std::int64_t batch_size, std::int64_t steps,
                              std::int64_t warm_up) {
  std::mt19937_64 rng(3);
  SideBySide out;
  for (std::int64_t step = 1; step <= steps; ++step) {
    const Batch batch = random_batch(rng, batch_size, fields, num_int);
    const double cpu_loss = on_cpu.forward(batch, /*training=*/true);
    const double gpu_loss = on_gpu.forward(batch, /*training=*/true);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * (1 + std::abs(cpu_loss))) << "step " << step;
    out.worst_output = std::max(out.worst_output, max_relative_difference(on_gpu.outputs().to_vector<float>(),
                                                                          on_cpu.outputs().to_vector<float>()));
    on_cpu.backward();
    on_gpu.backward();
    const std::vector<Parameter*> cpu_params = on_cpu.parameters(), gpu_params = on_gpu.parameters();
    EXPECT_EQ(cpu_params.size(), gpu_params.size());
    for (std::size_t k = 0; k < std::min(cpu_params.size(), gpu_params.size()); ++k) {
      Parameter& c = *cpu_params[k];
      Parameter& g = *gpu_params[k];
      if (c.kind() == ParamKind::sparse) {
        EXPECT_EQ(g.sparse_grad().ids, c.sparse_grad().ids) << c.name();
        out.worst_grad = std::max(out.worst_grad, max_relative_difference(g.sparse_grad().rows.to_vector<float>(),
                                                                          c.sparse_grad().rows.to_vector<float>()));
        // Both stores move their rows the same way, so the next batches pull equal rows.
        cpu_stores.stores.at(c.name())->push(c.sparse_grad().ids, c.sparse_grad().rows.data<float>(), 0.5);
        gpu_stores.stores.at(g.name())->push(c.sparse_grad().ids, c.sparse_grad().rows.data<float>(), 0.5);
      } else {
        out.worst_grad = std::max(out.worst_grad, max_relative_difference(g.grad().to(Device::cpu()).to_vector<float>(),
                                                                          c.grad().to_vector<float>()));
      }
    }
    if (step == warm_up) out.warm_allocations = cuda::device_allocator(0).stats().source_allocations;
  }
  out.allocations = cuda::device_allocator(0).stats().source_allocations;
  return out;
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
  const SideBySide r = train_side_by_side(*on_cpu, *on_gpu, cpu_stores, gpu_stores, kFields, kInts, kBatch, kSteps,
                                          kWarmUp);
  std::printf("[ gpu      ] bags on the %s: worst relative difference %.2e (gradients), %.2e (outputs); "
              "%lld CUDA allocations by step %lld, %lld by step %lld\n",
              GetParam().c_str(), r.worst_grad, r.worst_output, static_cast<long long>(r.warm_allocations),
              static_cast<long long>(kWarmUp), static_cast<long long>(r.allocations),
              static_cast<long long>(kSteps));
  EXPECT_LT(r.worst_grad, 1e-4);
  EXPECT_LT(r.worst_output, 1e-4);
  EXPECT_EQ(r.allocations, r.warm_allocations) << "steps after the warm-up asked CUDA for memory";
}

// Every table on two in-process parameter-server shards per model, async, with a worker-side
// hot-row cache (1024 rows, staleness 3): the GPU model keeps its deep tables' cached rows on
// the GPU (device_row_cache) and copies over only the rows fetched into the cache; the CPU
// model reads the same cache on the host. They follow each other within fp32 rounding, fewer
// rows travel than the steps pulled, and the mirror allocates nothing after the warm-up.
TEST(GpuWideDeepRowCache, AMirroredWorkerCacheFollowsTheCpuModel) {
  cuda::register_tensor_backend();
  cuda::register_device_ops();
  constexpr std::int64_t kFields = 4, kInts = 3, kBatch = 256, kSteps = 40, kWarmUp = 5;
  ps::TableOptions options;
  options.consistency = "async";
  options.cache_rows = 1024;
  options.cache_staleness = 3;
  optim::OptimizerOptions sparse;
  sparse.type = "adagrad";
  sparse.lr = 0.1;
  ps::testing::Cluster cpu_cluster(2), gpu_cluster(2);
  KeepingFactory cpu_stores{ps::ps_embedding_store_factory(cpu_cluster.client(), sparse, options)};
  KeepingFactory gpu_stores{ps::ps_embedding_store_factory(gpu_cluster.client(), sparse, options)};
  ModelContext cpu_context{ctr_spec(kFields, kInts), 7, DType::f32, cpu_stores.factory(), {}};
  ModelContext gpu_context{ctr_spec(kFields, kInts), 7, DType::f32, gpu_stores.factory(), {}};
  auto on_cpu = build("device", cpu_context);
  auto on_gpu = build("device", gpu_context);
  on_gpu->to(Device::cuda(0));
  const SideBySide r = train_side_by_side(*on_cpu, *on_gpu, cpu_stores, gpu_stores, kFields, kInts, kBatch, kSteps,
                                          kWarmUp);
  const WideDeep::DeviceRowCounts rows = dynamic_cast<WideDeep&>(*on_gpu).device_row_counts();
  std::printf("[ gpu      ] mirrored row cache: worst relative difference %.2e (gradients), %.2e (outputs); "
              "%lld of %lld pulled rows copied; %lld CUDA allocations by step %lld, %lld by step %lld\n",
              r.worst_grad, r.worst_output, static_cast<long long>(rows.copied), static_cast<long long>(rows.pulled),
              static_cast<long long>(r.warm_allocations), static_cast<long long>(kWarmUp),
              static_cast<long long>(r.allocations), static_cast<long long>(kSteps));
  EXPECT_LT(r.worst_grad, 1e-4);
  EXPECT_LT(r.worst_output, 1e-4);
  EXPECT_LT(rows.copied, rows.pulled);
  EXPECT_EQ(r.allocations, r.warm_allocations) << "steps after the warm-up asked CUDA for memory";
}

INSTANTIATE_TEST_SUITE_P(Bags, GpuWideDeep, ::testing::Values("device", "host"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return "On" + info.param; });

}  // namespace
}  // namespace aiacc::models
