// train.early_stopping through the trainer: a job stops after `patience` evaluations in a row
// without an improvement, saves its checkpoint there, records why, and a resumed job trains no
// further unless the patience is raised; jobs that cannot watch the metric are refused by key.
// The observations themselves against hand-made sequences.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/trainer/early_stopping.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kBase = fs::temp_directory_path() / "aiacc_early_stopping_train";

// An MLP on synthetic images, 12 steps, evaluated every 2.
JobOptions job(const fs::path& dir, const std::string& stopping, int eval_every_steps = 2,
               const std::string& checkpoint_extra = "", double lr = 0.05) {
  fs::create_directories(dir);
  const auto path = dir / "job.yaml";
  std::ofstream(path) << "job: {name: stop, run_dir: " << dir.string() << ", threads: 1, seed: 3}\n"
                      << "model: {type: mlp, mlp: {hidden: [16]}}\n"
                      << "data:\n  batch_size: 32\n"
                      << "  train: {type: synthetic_images, synthetic_images: {size: 1024, height: 8, width: 8}}\n"
                      << "  test: {type: synthetic_images, synthetic_images: {size: 64, height: 8, width: 8}}\n"
                      << "optimizer: {type: sgd, lr: " << lr << "}\n"
                      << "train: {max_steps: 12, log_every_steps: 5, eval_each_epoch: false, eval_every_steps: "
                      << eval_every_steps << ",\n"
                      << "        early_stopping: " << stopping << ",\n"
                      << "        checkpoint: {at_end: true, resume: auto" << checkpoint_extra << "}}\n";
  return load_job(path.string(), {});
}

std::vector<nlohmann::json> records(const fs::path& dir, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream metrics(dir / "stop" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") == kind) out.push_back(std::move(record));
  }
  return out;
}

// The step of the eval record with the lowest test loss (the first of equals), or 0.
std::int64_t lowest_loss_step(const fs::path& dir) {
  std::int64_t best_step = 0;
  double best = INFINITY;
  for (const auto& record : records(dir, "eval")) {
    if (record.at("loss").get<double>() < best) {
      best = record.at("loss").get<double>();
      best_step = record.at("step").get<std::int64_t>();
    }
  }
  return best_step;
}

// min_delta 10: no loss improves by that much after the first evaluation, so with patience 2
// the evaluations at steps 4 and 6 stop the job at step 6.
TEST(EarlyStoppingTraining, AJobStopsAfterPatienceEvaluationsWithoutImprovementAndStaysStopped) {
  const fs::path dir = kBase / "stops";
  fs::remove_all(dir);
  const std::string stopping = "{metric: loss, patience: 2, min_delta: 10}";
  {
    Trainer trainer(job(dir, stopping));
    const TrainResult result = trainer.run();
    EXPECT_EQ(result.steps, 6);
    EXPECT_TRUE(result.stopped_early);
  }
  std::vector<int> steps;
  for (const auto& record : records(dir, "eval")) steps.push_back(record.at("step").get<int>());
  EXPECT_EQ(steps, (std::vector<int>{2, 4, 6}));
  EXPECT_TRUE(fs::exists(dir / "stop" / "checkpoints" / "step-000000000006"));
  const auto summaries = records(dir, "summary");
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].at("early_stopping").at("best_step"), 2);
  EXPECT_EQ(summaries[0].at("early_stopping").at("stopped"), true);
  // The last interval (step 6, not a multiple of log_every_steps) is recorded.
  EXPECT_EQ(records(dir, "train").back().at("step"), 6);
  // Resumed: nothing more to train.
  {
    Trainer again(job(dir, stopping));
    const TrainResult result = again.run();
    EXPECT_EQ(result.steps, 6);
    EXPECT_TRUE(result.stopped_early);
  }
  // A raised patience trains on from the checkpoint until it runs out again (step 8).
  {
    Trainer patient(job(dir, "{metric: loss, patience: 3, min_delta: 10}"));
    const TrainResult result = patient.run();
    EXPECT_EQ(result.resumed_from_step, 6);
    EXPECT_EQ(result.steps, 8);
  }
  fs::remove_all(kBase);
}

TEST(EarlyStoppingTraining, WithoutEarlyStoppingTheJobRunsToItsEnd) {
  const fs::path dir = kBase / "runs";
  fs::remove_all(dir);
  Trainer trainer(job(dir, "{metric: loss, patience: 0, min_delta: 10}"));
  const TrainResult result = trainer.run();
  EXPECT_EQ(result.steps, 12);
  EXPECT_FALSE(result.stopped_early);
  fs::remove_all(kBase);
}

// train.checkpoint.keep_best: every evaluation that is the best so far saves a checkpoint, and
// the best one stays beside keep_last's (1: the last). A learning rate of 3 makes the test loss
// climb after its first evaluations, so the best is not the last.
TEST(EarlyStoppingTraining, KeepBestKeepsTheBestEvaluationsCheckpointBesideTheLast) {
  const fs::path dir = kBase / "best";
  fs::remove_all(dir);
  {
    Trainer trainer(job(dir, "{metric: loss}", 2, ", keep_last: 1, keep_best: true", 3.0));
    EXPECT_EQ(trainer.run().steps, 12);
  }
  const std::int64_t best_step = lowest_loss_step(dir);
  ASSERT_GT(best_step, 0);
  ASSERT_LT(best_step, 12) << "the test loss kept falling: this job shows nothing";
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(dir / "stop" / "checkpoints")) {
    kept.push_back(entry.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{fmt::format("step-{:012d}", best_step), "step-000000000012"}));
  const auto summaries = records(dir, "summary");
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_THAT(summaries[0].at("best_checkpoint").get<std::string>(), HasSubstr(fmt::format("step-{:012d}", best_step)));
  EXPECT_EQ(summaries[0].at("early_stopping").at("best_step"), best_step);
  fs::remove_all(kBase);
}

// Patience that runs out at the job's last step stops nothing: a job resumed with more steps
// trains on (and stops at its next evaluation without an improvement).
TEST(EarlyStoppingTraining, PatienceRunningOutAtTheLastStepLeavesTheJobFreeToTrainOn) {
  const fs::path dir = kBase / "last";
  fs::remove_all(dir);
  JobOptions options = job(dir, "{metric: loss, patience: 1, min_delta: 10}");
  options.train.max_steps = 4;
  {
    Trainer trainer(options);
    const TrainResult result = trainer.run();
    EXPECT_EQ(result.steps, 4);
    EXPECT_FALSE(result.stopped_early);
  }
  options.train.max_steps = 8;
  Trainer longer(options);
  const TrainResult result = longer.run();
  EXPECT_EQ(result.resumed_from_step, 4);
  EXPECT_EQ(result.steps, 6);
  EXPECT_TRUE(result.stopped_early);
  fs::remove_all(kBase);
}

// keep_best across a resume: the best step's checkpoint (saved before the stop, and the one the
// job resumes from, as no other was saved) survives the resumed job's saves with keep_last 1.
TEST(EarlyStoppingTraining, TheBestCheckpointSurvivesAResume) {
  const fs::path dir = kBase / "best_resumed";
  fs::remove_all(dir);
  const JobOptions options = job(dir, "{metric: loss}", 2, ", keep_last: 1, keep_best: true", 3.0);
  {
    Trainer first(options);
    EXPECT_EQ(first.run(RunControl{.stop_after_step = 6}).steps, 6);
  }
  Trainer second(options);
  EXPECT_EQ(second.run().steps, 12);
  const std::int64_t best_step = lowest_loss_step(dir);
  ASSERT_GT(best_step, 0);
  ASSERT_LT(best_step, 6) << "the best should come before the stop for this test to show anything";
  EXPECT_TRUE(fs::exists(dir / "stop" / "checkpoints" / fmt::format("step-{:012d}", best_step)));
  fs::remove_all(kBase);
}

TEST(EarlyStoppingTraining, JobsThatCannotWatchTheMetricAreRefusedByKey) {
  try {
    Trainer trainer(job(kBase / "no_evals", "{patience: 2}", 0));
    ADD_FAILURE() << "early stopping without evaluations";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.early_stopping.patience: 2 watches the test evaluations, and this job has none"));
  }
  try {
    Trainer trainer(job(kBase / "no_evals_best", "{}", 0, ", keep_best: true"));
    ADD_FAILURE() << "keep_best without evaluations";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.checkpoint.keep_best: true watches the test evaluations"));
  }
  try {
    Trainer trainer(job(kBase / "auc", "{metric: auc, patience: 2}"));
    ADD_FAILURE() << "AUC of a 10-class job";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.early_stopping.metric: auc is measured for binary labels"));
  }
  fs::remove_all(kBase);
}

TEST(EarlyStopping, CountsEvaluationsWithoutAnImprovementBeyondMinDelta) {
  EarlyStoppingOptions options;
  options.metric = "auc";
  options.patience = 2;
  options.min_delta = 0.01;
  EarlyStopping higher(options);
  EXPECT_FALSE(higher.observe(0.70, 1));
  EXPECT_FALSE(higher.observe(0.705, 2));  // not by more than 0.01
  EXPECT_FALSE(higher.observe(0.72, 3));   // resets the count
  EXPECT_FALSE(higher.observe(NAN, 4));    // never an improvement
  EXPECT_TRUE(higher.observe(0.725, 5));
  EXPECT_TRUE(higher.stopped());
  EXPECT_THAT(higher.describe(), HasSubstr("test auc 0.7200 at step 3, the best; 2 evaluation(s) since"));
  // Lower is better for a loss; the state carries over a checkpoint.
  options.metric = "loss";
  EarlyStopping lower(options);
  EXPECT_FALSE(lower.observe(1.0, 1));
  EXPECT_FALSE(lower.observe(0.995, 2));  // lower, but not by more than 0.01
  EarlyStopping restored(options);
  restored.restore(lower.to_json());
  EXPECT_TRUE(restored.observe(1.5, 3));
  // Another metric's state is not this one's.
  EarlyStopping other(options);
  other.restore(higher.to_json());
  EXPECT_FALSE(other.stopped());
  EXPECT_FALSE(other.observe(0.9, 1));
}

}  // namespace
}  // namespace aiacc::trainer
