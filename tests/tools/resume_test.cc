// Checkpoint and resume: a job stopped right after a checkpoint at step k and resumed with
// `resume: auto` ends with bitwise the same parameters and buffers as a job that never stopped
// (dropout masks, augmentation, shuffling, optimiser state, schedule and data position included).
// resume: never and overwrite beside an earlier run, and what overwrite removes or refuses to.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/testing/file_size_limit.h"
#include "tests/testing/scoped_env.h"
#include "tools/trainer/checkpoint.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/run_folder.h"
#include "tools/trainer/run_folder_lock.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

using aiacc::testing::FileSizeLimit;
using aiacc::testing::ScopedEnv;

JobOptions job_in(const std::filesystem::path& run_dir, const std::string& model_block,
                  const std::string& data_block) {
  std::filesystem::remove_all(run_dir);
  std::filesystem::create_directories(run_dir);
  auto path = run_dir / "job.yaml";
  std::ofstream(path) << "job: {name: resume, run_dir: " << run_dir.string() << ", threads: 2}\n"
                      << model_block << data_block
                      << "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true,\n"
                         "            schedule: {type: cosine, warmup_steps: 4}}\n"
                         "train: {epochs: 3, max_steps: 20, log_every_steps: 5, eval_each_epoch: false,\n"
                         "        checkpoint: {every_steps: 5, keep_last: 2}}\n";
  return load_job(path.string(), {});
}

::testing::AssertionResult bitwise_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "tensor counts differ";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return ::testing::AssertionFailure() << a[i].first << " vs " << b[i].first;
    if (a[i].second.num_bytes() != b[i].second.num_bytes() ||
        std::memcmp(a[i].second.raw_data(), b[i].second.raw_data(), a[i].second.num_bytes()) != 0) {
      return ::testing::AssertionFailure() << "tensor " << a[i].first << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

void expect_resume_is_bitwise(const std::string& model_block, const std::string& data_block,
                              const std::string& tag) {
  auto base = std::filesystem::temp_directory_path() / ("aiacc_resume_" + tag);
  JobOptions straight = job_in(base / "straight", model_block, data_block);
  Trainer uninterrupted(straight);
  TrainResult full = uninterrupted.run();
  EXPECT_EQ(full.steps, 20);
  EXPECT_EQ(full.resumed_from_step, -1);

  JobOptions stopped = job_in(base / "stopped", model_block, data_block);
  {
    Trainer first(stopped);
    TrainResult partial = first.run(RunControl{.stop_after_step = 10});
    EXPECT_EQ(partial.steps, 10);
  }
  Trainer second(stopped);  // a new process would rebuild everything from the config
  TrainResult resumed = second.run();
  EXPECT_EQ(resumed.resumed_from_step, 10);
  EXPECT_EQ(resumed.steps, 20);
  EXPECT_TRUE(bitwise_equal(uninterrupted.model_tensors(), second.model_tensors()));
  EXPECT_TRUE(bitwise_equal(uninterrupted.embedding_rows(), second.embedding_rows()));
}

TEST(Resume, DenseModelWithDropoutAndAugmentation) {
  expect_resume_is_bitwise(
      "model: {type: mlp, mlp: {hidden: [32, 16], dropout: 0.2}}\n",
      "data:\n  batch_size: 16\n  augment: {random_crop_padding: 2, horizontal_flip: true}\n"
      "  train: {type: synthetic_images, synthetic_images: {size: 120, height: 12, width: 12}}\n"
      "  test: {type: synthetic_images, synthetic_images: {size: 32, height: 12, width: 12}}\n",
      "dense");
}

TEST(Resume, WideDeepWithSparseTablesInLocalStores) {
  expect_resume_is_bitwise(
      "model: {type: wide_deep, wide_deep: {embedding_dim: 4, hidden: [8], dropout: 0.1,\n"
      "        cross_features: [C1_x_C2]}}\n"
      "sparse_optimizer: {type: adagrad, lr: 0.05}\n",
      "data:\n  batch_size: 16\n"
      "  train: {type: synthetic_ctr, synthetic_ctr: {size: 200, num_integer: 3, num_categorical: 4, vocabulary: 50}}\n"
      "  test: {type: synthetic_ctr, synthetic_ctr: {size: 64, num_integer: 3, num_categorical: 4, vocabulary: 50}}\n",
      "wide_deep");
}

// An MLP on 64 8x8 images, batch 16: 4 steps an epoch, 3 epochs, checkpoints every 5 steps.
JobOptions tiny_mlp_job(const std::filesystem::path& run_dir) {
  return job_in(run_dir, "model: {type: mlp, mlp: {hidden: [8]}}\n",
                "data:\n  batch_size: 16\n"
                "  train: {type: synthetic_images, synthetic_images: {size: 64, height: 8, width: 8}}\n"
                "  test: {type: synthetic_images, synthetic_images: {size: 16, height: 8, width: 8}}\n");
}

TEST(Resume, NoCheckpointMeansFreshStartAndNeverIgnoresOne) {
  auto base = std::filesystem::temp_directory_path() / "aiacc_resume_never";
  JobOptions job = tiny_mlp_job(base);
  { Trainer t(job); EXPECT_EQ(t.run().resumed_from_step, -1); }
  // 64 examples / batch 16 = 4 steps per epoch, 3 epochs: the job ends at step 12. Resuming a
  // finished job finds nothing left to do.
  { Trainer t(job); TrainResult r = t.run(); EXPECT_EQ(r.resumed_from_step, 12); EXPECT_EQ(r.steps, 12); }
  job.train.checkpoint.resume = "never";
  // Starting afresh next to an earlier run's checkpoints would mix the two runs' checkpoints
  // (a later resume: auto takes the higher step of either): refused, naming the folder.
  try {
    Trainer t(job);
    t.run();
    ADD_FAILURE() << "resume: never ran beside an earlier run's checkpoints";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("resume: never starts afresh, but"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("newest step-000000000012"));
  }
  // The refused run wrote nothing: the folder's config still describes its checkpoints.
  std::ifstream config(std::filesystem::path(job.job.run_dir) / job.job.name / "config.yaml");
  const std::string text((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, ::testing::HasSubstr("resume: auto"));
  // A run that saves nothing is refused too: its records would follow the earlier run's, and its
  // config.yaml replace the one that describes the checkpoints. overwrite starts afresh.
  job.train.checkpoint.at_end = false;
  job.train.checkpoint.every_steps = 0;
  EXPECT_THROW({ Trainer t(job); t.run(); }, ConfigError);
  job.train.checkpoint.resume = "overwrite";
  { Trainer t(job); EXPECT_EQ(t.run().resumed_from_step, -1); }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(job.job.run_dir) / job.job.name / "checkpoints"));
}

// Two jobs in one run folder would interleave their checkpoints and metrics (the second resuming
// from the first's steps while it writes them): a job's leader holds the folder's lock while it
// trains, and a second job is refused at once, naming the folder and the holder.
TEST(Resume, ASecondJobInTheSameRunFolderIsRefusedWhileTheFirstRuns) {
  auto base = std::filesystem::temp_directory_path() / "aiacc_resume_lock";
  JobOptions job = tiny_mlp_job(base);
  const auto folder = std::filesystem::path(job.job.run_dir) / job.job.name;
  std::filesystem::create_directories(folder);
  {
    RunFolderLock running(folder);  // the first job, training
    EXPECT_TRUE(running.held());
    try {
      Trainer second(job);
      second.run();
      ADD_FAILURE() << "a second job ran in a folder in use";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("the run folder " + folder.string() + " is in use by another job (pid " +
                                                 std::to_string(::getpid()) + " on "));
    }
    EXPECT_FALSE(std::filesystem::exists(folder / "checkpoints")) << "the refused job wrote checkpoints";
  }
  // Once the first job has ended (however: the kernel drops the lock with its process), the folder is free.
  Trainer later(job);
  EXPECT_EQ(later.run().steps, 12);
}

// resume: overwrite removes what the trainer wrote into the folder and nothing else. Its traces
// are trace.json and trace-step-N.json, either with -K (trace_file_name); a user's
// trace-analysis.json beside them was removed too. A `checkpoints` link whose target is gone was
// left (exists() follows the link), and the new run's checkpoints went nowhere.
TEST(Resume, OverwriteRemovesOnlyWhatTheTrainerWrote) {
  const auto folder = std::filesystem::temp_directory_path() / "aiacc_resume_overwrite_files";
  JobOptions job = tiny_mlp_job(folder.parent_path() / "aiacc_resume_overwrite_job");
  job.train.checkpoint.resume = "overwrite";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const std::vector<std::string> traces = {"trace.json", "trace-2.json", "trace-step-8.json", "trace-step-8-3.json"};
  const std::vector<std::string> others = {"trace-analysis.json", "trace-step-x.json", "trace-2-3.json",
                                           "my-trace.json", "trace.json.bak", "notes.txt"};
  for (const auto& name : traces) std::ofstream(folder / name) << "{}";
  for (const auto& name : others) std::ofstream(folder / name) << "{}";
  std::filesystem::create_directory_symlink(folder / "gone", folder / "checkpoints");

  prepare_run_folder(job, folder, /*leader=*/true, /*locked=*/true);

  for (const auto& name : traces) EXPECT_FALSE(std::filesystem::exists(folder / name)) << name;
  for (const auto& name : others) EXPECT_TRUE(std::filesystem::exists(folder / name)) << name;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(folder / "checkpoints")))
      << "the dangling checkpoints link is left";
  std::filesystem::remove_all(folder);
}

// A folder with an earlier run's checkpoint and records.
std::filesystem::path folder_with_an_earlier_run(const std::string& tag) {
  const auto folder = std::filesystem::temp_directory_path() / ("aiacc_resume_" + tag);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder / "checkpoints" / "step-000000000008");
  std::ofstream(folder / "metrics.jsonl") << "{\"kind\":\"run_start\",\"step\":0}\n";
  return folder;
}

// A Slurm requeue or a torchrun (or local launcher) restart of a job with resume: overwrite
// removed the checkpoint the attempt was to resume from, and started over: refused on every
// worker, naming the key, the variable and the folder, removing nothing. A first attempt
// (count 0) overwrites.
TEST(Resume, OverwriteInARestartedAttemptIsRefused) {
  JobOptions job = tiny_mlp_job(std::filesystem::temp_directory_path() / "aiacc_resume_overwrite_job");
  job.train.checkpoint.resume = "overwrite";
  const auto folder = folder_with_an_earlier_run("overwrite_restart");
  for (const char* variable : {"AIACC_RESTART_COUNT", "SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const ScopedEnv restarted(variable, "1");
    for (const bool leader : {true, false}) {
      try {
        prepare_run_folder(job, folder, leader, /*locked=*/leader);
        ADD_FAILURE() << variable << "=1 overwrote";
      } catch (const ConfigError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("train.checkpoint.resume: overwrite in a restarted attempt of the "
                                                   "job (" + std::string(variable) + "=1)"));
        EXPECT_THAT(e.what(), ::testing::HasSubstr(folder.string()));
        EXPECT_THAT(e.what(), ::testing::HasSubstr("train.checkpoint.resume: auto"));
      }
    }
    EXPECT_TRUE(std::filesystem::exists(folder / "checkpoints" / "step-000000000008"));
  }
  const ScopedEnv first_attempt("SLURM_RESTART_COUNT", "0");
  prepare_run_folder(job, folder, /*leader=*/true, /*locked=*/true);
  EXPECT_FALSE(std::filesystem::exists(folder / "checkpoints"));
  std::filesystem::remove_all(folder);
}

// Where the filesystem has no locks (Lustre, NFS without a lock manager) nothing keeps a second
// job out of the folder, and overwrite removed a running job's checkpoints and metrics: refused,
// naming the key, the folder and what it would remove. Nothing to remove: nothing to refuse.
TEST(Resume, OverwriteInAFolderThatCannotBeLockedIsRefused) {
  JobOptions job = tiny_mlp_job(std::filesystem::temp_directory_path() / "aiacc_resume_overwrite_job");
  job.train.checkpoint.resume = "overwrite";
  const auto folder = folder_with_an_earlier_run("overwrite_unlocked");
  try {
    prepare_run_folder(job, folder, /*leader=*/true, /*locked=*/false);
    ADD_FAILURE() << "overwrote a folder it could not lock";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train.checkpoint.resume: overwrite would remove checkpoints, "
                                               "metrics.jsonl from the run folder " + folder.string() +
                                               ", but the folder cannot be locked"));
  }
  EXPECT_TRUE(std::filesystem::exists(folder / "checkpoints" / "step-000000000008"));
  EXPECT_TRUE(std::filesystem::exists(folder / "metrics.jsonl"));
  prepare_run_folder(job, folder, /*leader=*/false, /*locked=*/false);  // workers remove nothing
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  prepare_run_folder(job, folder, /*leader=*/true, /*locked=*/false);
  std::filesystem::remove_all(folder);
}

// A full disk (here: the file-size limit, which fails writes with EFBIG as ENOSPC would) while
// a checkpoint is written: a clear error naming the file, no half checkpoint left behind, the
// previous checkpoint intact, and the next run resumes from it to the same end as an
// uninterrupted run.
TEST(Resume, AFullDiskFailsTheCheckpointClearlyAndKeepsThePreviousOne) {
  const std::string model = "model: {type: mlp, mlp: {hidden: [64]}}\n";
  const std::string data =
      "data:\n  batch_size: 16\n"
      "  train: {type: synthetic_images, synthetic_images: {size: 400}}\n"
      "  test: {type: synthetic_images, synthetic_images: {size: 32}}\n";
  auto base = std::filesystem::temp_directory_path() / "aiacc_resume_full_disk";
  JobOptions straight = job_in(base / "straight", model, data);
  Trainer uninterrupted(straight);
  ASSERT_EQ(uninterrupted.run().steps, 20);

  JobOptions job = job_in(base / "full", model, data);
  { Trainer first(job); ASSERT_EQ(first.run(RunControl{.stop_after_step = 10}).steps, 10); }
  {
    std::string error;
    {
      const FileSizeLimit limit(64 * 1024);  // the model file (~200 KB) no longer fits
      try {
        Trainer second(job);
        second.run();
      } catch (const IoError& e) {
        error = e.what();
      }
    }
    EXPECT_NE(error.find("step-000000000015.tmp/model.safetensors"), std::string::npos) << error;
    EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  }
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(base / "full" / "resume" / "checkpoints")) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-000000000005", "step-000000000010"}));
  CheckpointManager manager(base / "full" / "resume", 2);
  auto latest = manager.load_latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 10);

  Trainer third(job);
  TrainResult resumed = third.run();
  EXPECT_EQ(resumed.resumed_from_step, 10);
  EXPECT_EQ(resumed.steps, 20);
  EXPECT_TRUE(bitwise_equal(uninterrupted.model_tensors(), third.model_tensors()));
}

}  // namespace
}  // namespace aiacc::trainer
