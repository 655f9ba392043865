// Wide&Deep trained through the parameter servers equals local training:
//   - one worker over 2 shards (any consistency) reproduces the local run bit for bit;
//   - on a device with a worker-side hot-row cache, the device's mirror of the cache trains as
//     the host cache does, bit for bit, and copies fewer rows;
//   - two workers over 2 shards in synchronous mode, each on half of every batch, with their
//     dense gradients averaged (what the ring does) reproduce one local worker on the whole
//     batch, up to float rounding (sums over half batches are added in another order).
// Workers run as threads, each with its own model replica, PsClient and ZeroMQ context.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>

#include "core/config/node.h"
#include "core/error.h"
#include "core/embedding/local_embedding_store.h"
#include "core/optim/optimizer.h"
#include "models/model.h"
#include "ps/remote_embedding_store.h"
#include "tests/models/wide_deep_test_util.h"
#include "tests/ps/ps_fixture.h"
#include "models/wide_deep_model.h"
#include "tests/testing/fake_device.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::ps {
namespace {

constexpr int kFields = 3;
constexpr int kInts = 2;
constexpr int kBatch = 64;
constexpr int kSteps = 6;
constexpr const char* kModelYaml = "embedding_dim: 8\nhidden: [16, 8]\ncross_features: [C1_x_C2]\n";

struct Data {
  std::vector<std::vector<std::int64_t>> raw;  // [N][kFields]
  std::vector<float> ints;                     // [N, kInts]
  std::vector<float> labels;                   // [N]
};

Data make_data(int count, std::uint64_t seed) {
  Data d;
  Rng rng(seed);
  for (int i = 0; i < count; ++i) {
    std::vector<std::int64_t> row(kFields);
    for (auto& v : row) v = static_cast<std::int64_t>(rng.below(40)) * 1000003;
    d.raw.push_back(row);
    d.ints.push_back(static_cast<float>(rng.normal()));
    d.ints.push_back(static_cast<float>(rng.uniform()));
    d.labels.push_back(rng.uniform() < 0.4 ? 1.0f : 0.0f);
  }
  return d;
}

// Ids as a CTR feature's values are spread: half of them from 8 hot values, the rest from 300.
Data make_skewed_data(int count, std::uint64_t seed) {
  Data d = make_data(count, seed);
  Rng rng(seed, 7);
  for (auto& row : d.raw) {
    for (auto& v : row) v = static_cast<std::int64_t>(rng.uniform() < 0.5 ? rng.below(8) : 8 + rng.below(300));
  }
  return d;
}

Batch batch_of(const Data& data, int begin, int end) {
  std::vector<std::vector<std::vector<std::int64_t>>> fields(kFields);
  for (int i = begin; i < end; ++i) {
    for (int f = 0; f < kFields; ++f) fields[f].push_back({data.raw[i][f]});
  }
  return aiacc::testing::ctr_batch(
      fields, std::vector<float>(data.ints.begin() + begin * kInts, data.ints.begin() + end * kInts),
      kInts, std::vector<float>(data.labels.begin() + begin, data.labels.begin() + end));
}

optim::OptimizerOptions sparse_optimizer() {
  optim::OptimizerOptions o;
  o.type = "adagrad";
  o.lr = 0.1;
  return o;
}

// One model replica with its stores and dense optimiser, pushing sparse gradients from the
// grad-ready hooks as the trainer does.
struct Replica {
  aiacc::testing::KeepingFactory keep;
  std::unique_ptr<models::Model> model;
  std::vector<Parameter*> dense;
  std::unique_ptr<optim::Optimizer> optimizer;
  optim::OptimizerOptions dense_options;

  explicit Replica(EmbeddingStoreFactory factory, const std::string& yaml = kModelYaml,
                   Device device = Device::cpu())
      : keep(std::move(factory)) {
    InputSpec input;
    input.task = Task::binary;
    input.example_shape = Shape{kInts};
    for (int f = 1; f <= kFields; ++f) input.sparse_fields.push_back(fmt::format("C{}", f));
    const models::ModelContext context{input, 5, DType::f32, keep.factory(), {}};
    model = models::model_registry().create(
        "wide_deep", config::Document::from_string(yaml, "m.yaml").root(), context);
    model->to(device);
    for (Parameter* p : model->parameters()) {
      if (p->kind() == ParamKind::dense) {
        dense.push_back(p);
        continue;
      }
      std::shared_ptr<EmbeddingStore> store = keep.stores.at(p->name());
      p->add_grad_ready_hook([store](Parameter& param) {
        const SparseGrad& grad = param.sparse_grad();
        store->push(grad.ids, grad.rows.data<float>(), 0.1);
      });
    }
    dense_options.type = "sgd";
    dense_options.lr = 0.05;
    optimizer = std::make_unique<optim::Optimizer>(dense_options, dense);
  }

  std::vector<float> predict(const Data& test) {
    model->forward(batch_of(test, 0, static_cast<int>(test.labels.size())), /*training=*/false);
    const auto s = model->outputs().span<float>();
    return {s.begin(), s.end()};
  }
};

std::vector<float> train_locally(const Data& train, const Data& test) {
  Replica r(local_embedding_store_factory(sparse_optimizer()));
  for (int step = 0; step < kSteps; ++step) {
    r.model->forward(batch_of(train, step * kBatch, (step + 1) * kBatch), true);
    r.model->backward();
    r.optimizer->step(r.dense_options.lr);
  }
  return r.predict(test);
}

TEST(PsWideDeep, OneWorkerOverTwoShardsEqualsLocalBitForBit) {
  const Data train = make_data(kSteps * kBatch, 1);
  const Data test = make_data(200, 2);
  const std::vector<float> local = train_locally(train, test);
  for (const char* consistency : {"async", "sync", "bounded"}) {
    testing::Cluster cluster(2);
    TableOptions options;
    options.consistency = consistency;
    Replica r(ps_embedding_store_factory(cluster.client(), sparse_optimizer(), options));
    for (int step = 0; step < kSteps; ++step) {
      r.model->forward(batch_of(train, step * kBatch, (step + 1) * kBatch), true);
      r.model->backward();
      r.optimizer->step(r.dense_options.lr);
    }
    EXPECT_EQ(r.predict(test), local) << consistency;
  }
}

TEST(PsWideDeep, TwoSyncWorkersOverTwoShardsEqualLocalTraining) {
  const Data train = make_data(kSteps * kBatch, 1);
  const Data test = make_data(200, 2);
  const std::vector<float> local = train_locally(train, test);

  constexpr int kWorkers = 2;
  testing::Cluster cluster(2);
  TableOptions options;
  options.consistency = "sync";
  options.num_workers = kWorkers;
  std::vector<std::vector<float>> dense_grads(kWorkers);  // flattened, per worker
  std::barrier sync_point(kWorkers);
  std::vector<std::vector<float>> predictions(kWorkers);
  aiacc::testing::run_ranks(kWorkers, [&](int w) {
    Replica r(ps_embedding_store_factory(cluster.client(w), sparse_optimizer(), options));
    const int half = kBatch / kWorkers;
    for (int step = 0; step < kSteps; ++step) {
      const int begin = step * kBatch + w * half;
      r.model->forward(batch_of(train, begin, begin + half), true);
      r.model->backward();  // sparse pushes: each returns once both workers' step is applied
      // Average the dense gradients over the workers (the ring's job in the trainer).
      auto& mine = dense_grads[w];
      mine.clear();
      for (Parameter* p : r.dense) {
        const auto g = p->grad().span<float>();
        mine.insert(mine.end(), g.begin(), g.end());
      }
      sync_point.arrive_and_wait();
      std::size_t offset = 0;
      for (Parameter* p : r.dense) {
        for (float& g : p->grad().span<float>()) {
          g = (dense_grads[0][offset] + dense_grads[1][offset]) / 2.0f;
          ++offset;
        }
      }
      sync_point.arrive_and_wait();
      r.optimizer->step(r.dense_options.lr);
    }
    predictions[w] = r.predict(test);
  });
  EXPECT_EQ(predictions[0], predictions[1]) << "the replicas diverged";
  ASSERT_EQ(predictions[0].size(), local.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < local.size(); ++i) {
    worst = std::max(worst, std::abs(double(predictions[0][i]) - double(local[i])));
  }
  std::printf("[ sync     ] max |logit(2 workers, 2 shards) - logit(local)| = %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
}

// With the deep tables' bags on a device and a worker-side hot-row cache (async, 64 rows,
// staleness 3), the device keeps a mirror of the cache's slots and a step copies over only the
// rows fetched into it since the last step (model.wide_deep.device_row_cache). Through
// evictions, refreshes and prefetches (every other step, as the trainer's), training with the
// mirror equals training without it and on the CPU bit for bit: the losses of every step and
// the test logits. It copies fewer rows, exactly those it scattered into the mirror.
TEST(PsWideDeep, DeviceRowCacheTrainsAsTheHostCacheBitForBit) {
  aiacc::testing::FakeDeviceLog& log = aiacc::testing::install_fake_device();
  constexpr int kCacheSteps = 16;
  const Data train = make_skewed_data((kCacheSteps + 1) * kBatch, 3);
  const Data test = make_skewed_data(kBatch, 4);  // one batch: at most cache_rows ids
  struct Run {
    std::vector<double> losses;
    std::vector<float> predictions;
    models::WideDeep::DeviceRowCounts rows;
    std::int64_t scattered = 0;
    embedding::HotRowCacheStats cache;
  };
  // fail_at: before that step, an evaluation forward whose C3 bag touches more rows than the
  // cache holds fails after C1 and C2 pulled (deep tables only: the wide ones would fail first).
  const auto run = [&](Device device, bool mirror, const std::string& model_yaml = kModelYaml, int fail_at = -1) {
    testing::Cluster cluster(2);
    TableOptions options;
    options.consistency = "async";
    options.cache_rows = 64;
    options.cache_staleness = 3;
    Replica r(ps_embedding_store_factory(cluster.client(), sparse_optimizer(), options),
              model_yaml + "device_row_cache: " + (mirror ? "true" : "false") + "\n", device);
    const std::int64_t scattered_before = log.scattered_rows;
    Run out;
    for (int step = 0; step < kCacheSteps; ++step) {
      if (step == fail_at) {
        Data wide = make_skewed_data(100, 9);
        for (std::size_t i = 0; i < wide.raw.size(); ++i) wide.raw[i][2] = 1000 + static_cast<std::int64_t>(i);
        EXPECT_THROW(r.model->forward(batch_of(wide, 0, 100), false), ConfigError);
      }
      out.losses.push_back(r.model->forward(batch_of(train, step * kBatch, (step + 1) * kBatch), true));
      r.model->backward();
      r.optimizer->step(r.dense_options.lr);
      if (step % 2 == 1) continue;
      const Batch next = batch_of(train, (step + 1) * kBatch, (step + 2) * kBatch);
      for (const auto& [name, ids] : r.model->embedding_ids(next)) {
        std::dynamic_pointer_cast<RemoteEmbeddingStore>(r.keep.stores.at(name))->prefetch(ids);
      }
    }
    out.predictions = r.predict(test);
    out.rows = dynamic_cast<models::WideDeep&>(*r.model).device_row_counts();
    out.scattered = log.scattered_rows - scattered_before;
    out.cache = std::dynamic_pointer_cast<RemoteEmbeddingStore>(r.keep.stores.at("deep.C1"))->cache_stats();
    return out;
  };
  const Run cpu = run(Device::cpu(), true);
  const Run copied = run(Device::cuda(0), false);
  const Run mirrored = run(Device::cuda(0), true);
  // The cache did evict and refresh rows, and served some from its slots.
  EXPECT_GT(mirrored.cache.evictions, 0);
  EXPECT_GT(mirrored.cache.refreshes, 0);
  EXPECT_GT(mirrored.cache.hits, 0);
  EXPECT_EQ(copied.losses, cpu.losses);
  EXPECT_EQ(mirrored.losses, cpu.losses);
  EXPECT_EQ(copied.predictions, cpu.predictions);
  EXPECT_EQ(mirrored.predictions, cpu.predictions);
  EXPECT_EQ(copied.rows.copied, copied.rows.pulled);
  EXPECT_EQ(copied.scattered, 0);
  EXPECT_EQ(mirrored.rows.pulled, copied.rows.pulled);
  EXPECT_EQ(mirrored.rows.copied, mirrored.scattered);
  EXPECT_LT(mirrored.rows.copied, mirrored.rows.pulled);
  std::printf("[ mirror   ] %lld of %lld pulled deep-table rows copied to the device\n",
              static_cast<long long>(mirrored.rows.copied), static_cast<long long>(mirrored.rows.pulled));

  // A forward that fails after some tables gave the mirror their written slots (here: a batch
  // too wide for the cache) leaves the mirror complete: the next step sends every slot again.
  const std::string deep_only = "embedding_dim: 8\nhidden: [16, 8]\nwide: false\n";
  const Run cpu_failing = run(Device::cpu(), true, deep_only, 8);
  const Run mirrored_failing = run(Device::cuda(0), true, deep_only, 8);
  EXPECT_EQ(mirrored_failing.losses, cpu_failing.losses);
  EXPECT_EQ(mirrored_failing.predictions, cpu_failing.predictions);
}

}  // namespace
}  // namespace aiacc::ps
