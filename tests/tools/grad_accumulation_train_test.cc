// train.gradient_accumulation_steps through the trainer. K micro-batches of B make one step on
// the mean of their gradients, so a job with B and K must train as a job with one batch of K x B
// (models without batch statistics; the same examples per step whatever the split): an MLP,
// and Wide&Deep whose embedding rows are summed over the micro-batches and pushed once. Both
// within 1e-5 of the larger batch's run (the sums' order differs); a resumed job continues at
// the right micro-batch (bitwise); and the accumulators' own arithmetic against references.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parameter.h"
#include "tests/testing/scoped_env.h"
#include "tools/trainer/grad_accumulation.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const char* kMlp = "model: {type: mlp, mlp: {hidden: [32, 16]}}\n"
                   "data:\n  batch_size: {B}\n  shuffle: true\n"
                   "  train: {type: synthetic_images, synthetic_images: {size: 1000, height: 8, width: 8}}\n"
                   "  test: {type: synthetic_images, synthetic_images: {size: 64, height: 8, width: 8}}\n";
// SGD on the rows: Adagrad's first step of a row is lr x g / |g|, whose sign flips with the
// summation order for a row whose gradients nearly cancel (rounding, not a bug).
const char* kWideDeep = "model:\n  type: wide_deep\n"
                        "  wide_deep: {embedding_dim: 4, hidden: [16], dropout: 0.0, cross_features: [C1_x_C2]}\n"
                        "data:\n  batch_size: {B}\n  shuffle: true\n"
                        "  train: {type: synthetic_ctr, synthetic_ctr: {num_integer: 13, num_categorical: 26, "
                        "vocabulary: 300, size: 3000}}\n"
                        "  test: {type: synthetic_ctr, synthetic_ctr: {num_integer: 13, num_categorical: 26, "
                        "vocabulary: 300, size: 200}}\n"
                        "sparse_optimizer: {type: sgd, lr: 0.05}\n";

std::string with_batch(std::string block, int batch) {
  block.replace(block.find("{B}"), 3, std::to_string(batch));
  return block;
}

const char* kCosine = "{type: sgd, lr: 0.05, momentum: 0.9, schedule: {type: cosine, warmup_steps: 2}}";

JobOptions job(const fs::path& dir, const std::string& model_and_data, int batch, int micro_batches,
               const std::string& train_extra = "", int max_steps = 12, const std::string& optimizer = kCosine) {
  fs::create_directories(dir);
  const auto path = dir / "job.yaml";
  std::ofstream(path) << "job: {name: accumulate, run_dir: " << dir.string() << ", threads: 1, seed: 7}\n"
                      << with_batch(model_and_data, batch)
                      << "optimizer: " << optimizer << "\n"
                      << "train: {epochs: 3, max_steps: " << max_steps << ", log_every_steps: 4, eval_each_epoch: false,\n"
                      << "        gradient_accumulation_steps: " << micro_batches << train_extra << ",\n"
                      << "        checkpoint: {every_steps: 6, at_end: false, resume: auto}}\n";
  return load_job(path.string(), {});
}

using Floats = std::map<std::string, std::vector<double>>;

Floats floats_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  Floats out;
  for (const auto& [name, t] : named) {
    const Tensor host = t.to(Device::cpu());
    auto& values = out[name];
    if (host.dtype() == DType::f32) values.assign(host.data<float>(), host.data<float>() + host.numel());
    if (host.dtype() == DType::i64) values.assign(host.data<std::int64_t>(), host.data<std::int64_t>() + host.numel());
  }
  return out;
}

// Every tensor of `a` within `rel` of `b`'s (relative to the tensor's largest magnitude).
void expect_close(const Floats& a, const Floats& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, x] : a) {
    const auto& y = b.at(name);
    ASSERT_EQ(x.size(), y.size()) << name;
    double scale = 1e-6, worst = 0;
    for (double v : x) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / scale);
    EXPECT_LE(worst, rel) << name;
  }
}

// The largest absolute difference between `a` and `b`'s values (tensors of the same shapes).
double largest_difference(const Floats& a, const Floats& b) {
  double largest = 0;
  for (const auto& [name, x] : a) {
    const auto& y = b.at(name);
    for (std::size_t i = 0; i < x.size(); ++i) largest = std::max(largest, std::fabs(x[i] - y[i]));
  }
  return largest;
}

// Each table's rows by id: "<table>" -> id -> values.
using RowsById = std::map<std::string, std::map<std::int64_t, std::vector<float>>>;

RowsById rows_by_id(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : named) by_name[name] = &t;
  RowsById out;
  for (const auto& [name, ids] : by_name) {
    if (!name.ends_with(".ids")) continue;
    const std::string table = name.substr(0, name.size() - 4);
    const Tensor& values = *by_name.at(table + ".values");
    const std::int64_t dim = values.dim(1);
    for (std::int64_t r = 0; r < ids->numel(); ++r) {
      out[table][ids->data<std::int64_t>()[r]].assign(values.data<float>() + r * dim,
                                                       values.data<float>() + (r + 1) * dim);
    }
  }
  return out;
}

struct Trained {
  RowsById rows_by_id;
  Floats model, rows;
  TrainResult result;
  std::vector<double> losses;  // the train records' losses
};

Trained train(const fs::path& dir, const std::string& model_and_data, int batch, int micro_batches,
              const std::string& train_extra = "", int max_steps = 12, const std::string& optimizer = kCosine) {
  fs::remove_all(dir);
  Trainer trainer(job(dir, model_and_data, batch, micro_batches, train_extra, max_steps, optimizer));
  Trained t;
  t.result = trainer.run();
  t.model = floats_of(trainer.model_tensors());
  t.rows = floats_of(trainer.embedding_rows());
  t.rows_by_id = rows_by_id(trainer.embedding_rows());
  std::ifstream metrics(dir / "accumulate" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") == "train") t.losses.push_back(record.at("loss").get<double>());
  }
  return t;
}

const fs::path kBase = fs::temp_directory_path() / "aiacc_grad_accumulation_train";

TEST(GradAccumulationTraining, FourMicroBatchesOfAnMlpEqualOneBatchFourTimesLarger) {
  const Trained whole = train(kBase / "mlp_64", kMlp, 64, 1);
  const Trained split = train(kBase / "mlp_16x4", kMlp, 16, 4);
  EXPECT_EQ(whole.result.steps, 12);
  EXPECT_EQ(split.result.steps, 12);
  expect_close(whole.model, split.model, 1e-5);
  // The progress records average the micro-batches' losses over the step's examples.
  ASSERT_EQ(whole.losses.size(), 3u);
  ASSERT_EQ(split.losses.size(), 3u);
  for (std::size_t i = 0; i < whole.losses.size(); ++i) EXPECT_NEAR(whole.losses[i], split.losses[i], 1e-5);
  // The comparison can fail: the micro-batches alone (no accumulation) train elsewhere.
  const Trained small = train(kBase / "mlp_16", kMlp, 16, 1);
  EXPECT_GT(largest_difference(whole.model, small.model), 1e-3);
  fs::remove_all(kBase);
}

TEST(GradAccumulationTraining, WideDeepRowsAreAveragedOverTheMicroBatches) {
  const Trained whole = train(kBase / "wd_64", kWideDeep, 64, 1);
  const Trained split = train(kBase / "wd_32x2", kWideDeep, 32, 2);
  expect_close(whole.model, split.model, 1e-5);
  ASSERT_FALSE(whole.rows.empty());
  expect_close(whole.rows, split.rows, 1e-5);
  // Clipping sees the accumulated mean: the same norms, the same clipped steps.
  const Trained clipped_whole = train(kBase / "wd_64_clip", kWideDeep, 64, 1, ", clip_grad_norm: 0.05");
  const Trained clipped_split = train(kBase / "wd_32x2_clip", kWideDeep, 32, 2, ", clip_grad_norm: 0.05");
  EXPECT_GT(clipped_whole.result.clipped_steps, 0);
  EXPECT_EQ(clipped_whole.result.clipped_steps, clipped_split.result.clipped_steps);
  EXPECT_NEAR(clipped_whole.result.last_grad_norm, clipped_split.result.last_grad_norm,
              1e-5 * clipped_whole.result.last_grad_norm);
  expect_close(clipped_whole.model, clipped_split.model, 1e-5);
  fs::remove_all(kBase);
}

// Stopped at step 6 (12 micro-batches in), resumed: bitwise the uninterrupted job. A resume
// that took the checkpoint's position for steps, not batches, would start at batch 6 and differ.
TEST(GradAccumulationTraining, AResumedJobContinuesAtTheStepsMicroBatch) {
  const Trained straight = train(kBase / "straight", kWideDeep, 16, 2);
  const fs::path dir = kBase / "stopped";
  fs::remove_all(dir);
  {
    Trainer first(job(dir, kWideDeep, 16, 2));
    EXPECT_EQ(first.run(RunControl{.stop_after_step = 6}).steps, 6);
  }
  Trainer second(job(dir, kWideDeep, 16, 2));
  const TrainResult resumed = second.run();
  EXPECT_EQ(resumed.resumed_from_step, 6);
  EXPECT_EQ(resumed.steps, 12);
  expect_close(straight.model, floats_of(second.model_tensors()), 0.0);
  expect_close(straight.rows, floats_of(second.embedding_rows()), 0.0);
  // The same checkpoint under K = 4 and half the batch: the same global batch, the same step.
  Trainer regrouped(job(dir, kWideDeep, 8, 4));
  fs::remove_all(dir / "accumulate" / "checkpoints" / "step-000000000012");
  EXPECT_EQ(regrouped.run().resumed_from_step, 6);
  // And under a global batch that does not divide the position: refused, naming the terms.
  fs::remove_all(dir / "accumulate" / "checkpoints" / "step-000000000012");
  Trainer misfit(job(dir, kWideDeep, 16, 5));
  try {
    misfit.run();
    ADD_FAILURE() << "a position of 6 x 32 examples resumed under steps of 80";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.gradient_accumulation_steps 5"));
  }
  fs::remove_all(kBase);
}

TEST(GradAccumulationTraining, StepsNoDataFillsAndShortLastBatchesAreRefusedNamingTheKeys) {
  try {
    Trainer trainer(job(kBase / "too_big", kMlp, 500, 3));
    ADD_FAILURE() << "3 micro-batches of 500 from 1000 examples";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.gradient_accumulation_steps 3 leaves no full step"));
  }
  // A short last batch would weigh as much as a full one in its step's mean.
  try {
    Trainer trainer(job(kBase / "keep_last", std::string(kMlp) + "  drop_last: false\n", 16, 3));
    ADD_FAILURE() << "drop_last: false with micro-batches";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.drop_last: false with train.gradient_accumulation_steps 3"));
  }
  fs::remove_all(kBase);
}

// train.non_finite: skip with micro-batches: NaN features in the first micro-batch of step 3 skip
// the step's dense update, and every table whose rows were not finite in it pushes none (the
// second micro-batch's finite rows included): 3 steps end where 2 do but for the tables whose
// rows stayed finite.
TEST(GradAccumulationTraining, ANonFiniteMicroBatchSkipsTheStepAndHoldsBackItsTablesRows) {
  const char* sgd = "{type: sgd, lr: 0.05, momentum: 0.9}";
  const Trained two = train(kBase / "two", kWideDeep, 16, 2, ", non_finite: skip", 2, sgd);
  Trained three;
  {
    testing::ScopedEnv nan("AIACC_TEST_NAN_AT", "3");
    three = train(kBase / "three", kWideDeep, 16, 2, ", non_finite: skip", 3, sgd);
  }
  EXPECT_EQ(three.result.steps, 3);
  expect_close(two.model, three.model, 0.0);
  // The wide tables' row gradients are the NaN logits' in the first micro-batch: every row two
  // steps trained is as they left them (step 3's pulls created rows for its new ids, at their
  // initial values), the second micro-batch's finite rows held back too. The deep tables' rows
  // come through ReLUs that the NaN switched off, finite: as without accumulation, those are
  // pushed (README: a skipped step's finite rows still apply).
  ASSERT_FALSE(two.rows_by_id.empty());
  int deep_moved = 0;
  for (const auto& [table, rows] : two.rows_by_id) {
    for (const auto& [id, values] : rows) {
      if (table.starts_with("wide.")) {
        EXPECT_EQ(three.rows_by_id.at(table).at(id), values) << table << " " << id;
      } else {
        deep_moved += three.rows_by_id.at(table).at(id) != values ? 1 : 0;
      }
    }
  }
  EXPECT_GT(deep_moved, 0);
  // Without the NaN the third step moves them (the comparison can fail).
  const Trained clean = train(kBase / "clean", kWideDeep, 16, 2, ", non_finite: skip", 3, sgd);
  EXPECT_GT(largest_difference(two.model, clean.model), 1e-6);
  fs::remove_all(kBase);
}

// The dense accumulator's hooks, before a hook that reads the gradient as the all-reduce would:
// on the last micro-batch it sees the step's sum (the mean is taken after the reduction, by
// scale_gradients).
TEST(DenseGradAccumulator, TheLastMicroBatchsHookLeavesTheSumForTheHooksAfterIt) {
  Parameter used("used", Tensor::zeros(Shape{3}));
  Parameter idle_last("idle_last", Tensor::zeros(Shape{2}));
  DenseGradAccumulator accumulator({&used, &idle_last}, 3);
  std::vector<float> seen, seen_idle;
  int idle_calls = 0;
  used.add_grad_ready_hook([&](Parameter& p) { seen.assign(p.grad().data<float>(), p.grad().data<float>() + 3); });
  idle_last.add_grad_ready_hook([&](Parameter& p) {
    ++idle_calls;
    seen_idle.assign(p.grad().data<float>(), p.grad().data<float>() + 2);
  });
  const float grads[3][3] = {{1, 2, 3}, {10, 20, 30}, {100, 200, 300}};
  for (int m = 0; m < 3; ++m) {
    accumulator.begin_micro_batch(m);
    std::copy(grads[m], grads[m] + 3, used.grad().data<float>());
    used.grad_ready();
    if (m < 2) {
      idle_last.grad().data<float>()[0] = 3.0f * static_cast<float>(m + 1);
      idle_last.grad().data<float>()[1] = -6.0f;
      idle_last.grad_ready();
    }
  }
  // The later hook fired each micro-batch (the fuser ignores those outside its step); on the
  // last it saw the sum.
  EXPECT_EQ(seen, (std::vector<float>{111, 222, 333}));
  // Unused by the last micro-batch: finish_step() gives it the sum of the others and fires the
  // hooks after the accumulator's (the all-reduce's) for it.
  ASSERT_EQ(idle_calls, 2);
  accumulator.finish_step();
  EXPECT_EQ(idle_calls, 3);
  EXPECT_EQ(seen_idle, (std::vector<float>{9, -12}));
  // The mean, and the first gradient that was not finite.
  std::vector<Parameter*> both{&used, &idle_last};
  EXPECT_EQ(scale_gradients(both, 1.0f / 3), -1);
  EXPECT_FLOAT_EQ(used.grad().data<float>()[2], 111.0f);
  EXPECT_FLOAT_EQ(idle_last.grad().data<float>()[0], 3.0f);
  idle_last.grad().data<float>()[1] = NAN;
  EXPECT_EQ(scale_gradients(both, 1.0f), 1);
  // A new step starts a new sum.
  accumulator.begin_micro_batch(0);
  std::fill(used.grad().data<float>(), used.grad().data<float>() + 3, 3.0f);
  used.grad_ready();
  accumulator.begin_micro_batch(1);
  used.grad_ready();
  accumulator.begin_micro_batch(2);
  used.grad_ready();
  EXPECT_FLOAT_EQ(used.grad().data<float>()[0], 9.0f);
}

TEST(SparseRowAccumulator, RowsOfAnIdAreAveragedInFirstSeenOrder) {
  SparseRowAccumulator rows(2);
  const std::int64_t a[] = {5, 9};
  const float ga[] = {1, 2, 3, 4};
  const std::int64_t b[] = {7, 5};
  const float gb[] = {10, 20, 30, 40};
  rows.add(a, ga);
  rows.add(b, gb);
  const SparseRowAccumulator::StepRows step = rows.finish(2);
  ASSERT_EQ(step.ids.size(), 3u);
  EXPECT_EQ(std::vector<std::int64_t>(step.ids.begin(), step.ids.end()), (std::vector<std::int64_t>{5, 9, 7}));
  EXPECT_EQ(std::vector<float>(step.rows, step.rows + 6), (std::vector<float>{15.5f, 21.0f, 1.5f, 2.0f, 5.0f, 10.0f}));
  // The next add() starts the next step.
  rows.add(b, gb);
  const SparseRowAccumulator::StepRows next = rows.finish(1);
  ASSERT_EQ(next.ids.size(), 2u);
  EXPECT_EQ(next.ids[0], 7);
  EXPECT_EQ(next.rows[2], 30.0f);
  // A micro-batch whose rows were not finite: the step hands over none, whatever else came.
  rows.add(a, ga);
  rows.skip();
  rows.add(b, gb);
  EXPECT_TRUE(rows.finish(3).ids.empty());
  rows.add(a, ga);
  EXPECT_EQ(rows.finish(1).ids.size(), 2u);
}

}  // namespace
}  // namespace aiacc::trainer
