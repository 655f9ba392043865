// The aiacc-train program as a user meets it: exit status 2 and a located message for bad
// configs and usage, 0 for a dry run. Runs the real binary (path in argv[1]).
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/testing/process.h"
#include "tools/trainer/checkpoint.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string g_program;

aiacc::testing::CommandResult run(const std::string& arguments) {
  return aiacc::testing::run_command(g_program + " " + arguments + " 2>&1");
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

const char* kSmallJob =
    "job: {name: cli_test, run_dir: /tmp/aiacc_cli_test}\n"
    "model: {type: mlp, mlp: {hidden: [16]}}\n"
    "data:\n"
    "  batch_size: 32\n"
    "  train: {type: synthetic_images, synthetic_images: {size: 256}}\n"
    "  test: {type: synthetic_images, synthetic_images: {size: 64}}\n";

// A Wide&Deep job of 512 synthetic examples in batches of 64, run in /tmp/aiacc_cli_NAME;
// `model_extra` goes inside its wide_deep block.
std::string small_wide_deep_job(const std::string& name, const std::string& model_extra) {
  return "job: {name: " + name + ", run_dir: /tmp/aiacc_cli_" + name + "}\n"
         "model: {type: wide_deep, wide_deep: {embedding_dim: 4, hidden: [8]" + model_extra + "}}\n"
         "data:\n  batch_size: 64\n"
         "  train: {type: synthetic_ctr, synthetic_ctr: {size: 512, num_categorical: 4, num_integer: 2}}\n"
         "  test: {type: synthetic_ctr, synthetic_ctr: {size: 128, num_categorical: 4, num_integer: 2}}\n";
}

// The program exits 2 (a configuration or usage error) saying `expected`.
void expect_config_error(const std::string& arguments, const std::string& expected) {
  const aiacc::testing::CommandResult r = run(arguments);
  EXPECT_EQ(r.status, 2) << arguments << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr(expected)) << arguments;
}

TEST(Cli, UnknownKeyFromSetExitsTwoAndNamesKey) {
  std::string job = write_temp("aiacc_cli_job.yaml", kSmallJob);
  aiacc::testing::CommandResult o = run(job + " --set model.no_such_key=1 --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("model.no_such_key"));
  EXPECT_THAT(o.output, HasSubstr("--set model.no_such_key=1"));
}

TEST(Cli, UnknownKeyInFileNamesLineAndSuggestion) {
  std::string job = write_temp("aiacc_cli_typo.yaml",
                               std::string(kSmallJob) + "optimizer: {type: sgd, lr: 0.1, momentun: 0.9}\n");
  aiacc::testing::CommandResult o = run(job + " --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("aiacc_cli_typo.yaml:7:"));
  EXPECT_THAT(o.output, HasSubstr("optimizer.momentun"));
  EXPECT_THAT(o.output, HasSubstr("did you mean 'momentum'"));
}

TEST(Cli, YamlSyntaxErrorNamesLine) {
  std::string job = write_temp("aiacc_cli_syntax.yaml", "job: {name: x}\nmodel: {type: mlp\ndata: {}\n");
  aiacc::testing::CommandResult o = run(job);
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("aiacc_cli_syntax.yaml:"));
  EXPECT_THAT(o.output, HasSubstr("YAML syntax error"));
}

TEST(Cli, WrongTypeAndRangeSayWhatWasExpected) {
  std::string job = write_temp("aiacc_cli_range.yaml", kSmallJob);
  aiacc::testing::CommandResult bad_type = run(job + " --set data.batch_size=lots --dry-run");
  EXPECT_EQ(bad_type.status, 2);
  EXPECT_THAT(bad_type.output, HasSubstr("data.batch_size: expected an integer"));
  aiacc::testing::CommandResult bad_model = run(job + " --set model.type=resnt --dry-run");
  EXPECT_EQ(bad_model.status, 2);
  EXPECT_THAT(bad_model.output, HasSubstr("model.type"));
}

TEST(Cli, ScheduleThatDoesNotFitTheJobNamesTheFullKey) {
  std::string job = write_temp("aiacc_cli_schedule.yaml", kSmallJob);
  auto o = run(job + " --set train.max_steps=5 --set optimizer.schedule.type=cosine"
                     " --set optimizer.schedule.warmup_steps=10 --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("optimizer.schedule.total_steps"));
  EXPECT_THAT(o.output, HasSubstr("the job has 5 steps"));
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").status, 2);
  EXPECT_EQ(run("--no-such-flag x.yaml").status, 2);
  aiacc::testing::CommandResult missing = run("/nonexistent/job.yaml");
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/job.yaml"));
  // A folder read as an empty config would train the default job.
  expect_config_error(std::filesystem::temp_directory_path().string() + " --dry-run", "is a folder, not a config file");
  const std::string config = write_temp("cli_emit.yaml", kSmallJob);
  // The emitted files train: --eval or --dry-run would be lost in them.
  expect_config_error(config + " --emit slurm --eval /tmp/x", "excludes");
  expect_config_error(config + " --emit slurm --dry-run", "excludes");
  // A dry run plans training: the checkpoint to evaluate went unread.
  expect_config_error(config + " --dry-run --eval /nonexistent", "--dry-run excludes --eval");
  // Settings that would change nothing the user meant.
  expect_config_error(config + " --dry-run --set optimizer.type=adam --set optimizer.momentum=0.9",
                      "optimizer.momentum: applies to sgd and lars only, type is adam (its momentum is beta1)");
  expect_config_error(config + " --dry-run --set optimizer.type=lars --set optimizer.dampening=0.1",
                      "optimizer.dampening: applies to sgd only, type is lars");
  const auto unused = run(config + " --dry-run --set cluster.ps.min_count=5 --set cluster.ps.consistency=async");
  EXPECT_EQ(unused.status, 0) << unused.output;
  EXPECT_THAT(unused.output, HasSubstr("cluster.ps.consistency, cluster.ps.min_count have no effect: the job has no "
                                       "parameter servers"));
  // No value is not "the default".
  expect_config_error(config + " --dry-run --set optimizer.lr=", "--set optimizer.lr=: no value");
  // A job name is one folder inside run_dir.
  expect_config_error(config + " --dry-run --set job.name=../escaped", "job.name: expected a non-empty name without '/'");
  // Thread counts no machine has: OpenMP crashed (SIGSEGV at 65536 and up) before any message.
  expect_config_error(config + " --dry-run --set job.threads=70000", "job.threads: expected a value in [0, 1024]");
  const auto omp = aiacc::testing::run_command("OMP_NUM_THREADS=70000 " + g_program + " " + config + " --dry-run 2>&1");
  EXPECT_EQ(omp.status, 2) << omp.output;
  EXPECT_THAT(omp.output, HasSubstr("OMP_NUM_THREADS=70000: expected a whole number of threads from 1 to 1024"));
}

// --eval of something that is no checkpoint is refused as a configuration error, once, before
// any process starts: the workers used to start, make their data and each fail alike (exit 1).
TEST(Cli, EvalOfSomethingThatIsNotACheckpointSaysWhatItIs) {
  const std::string config = write_temp("cli_eval.yaml", kSmallJob) + " --set cluster.workers=2";
  aiacc::testing::CommandResult missing = run(config + " --eval /nonexistent/step-1");
  EXPECT_EQ(missing.status, 2) << missing.output;
  const std::string refusal = "config error: --eval: checkpoint /nonexistent/step-1: no such folder";
  EXPECT_THAT(missing.output, HasSubstr(refusal));
  EXPECT_EQ(missing.output.find(refusal), missing.output.rfind(refusal)) << "said more than once:\n" << missing.output;
  EXPECT_THAT(missing.output, Not(HasSubstr("started 2 workers")));
  const auto run_folder = std::filesystem::temp_directory_path() / "cli_eval_run";
  std::filesystem::create_directories(run_folder / "checkpoints");
  aiacc::testing::CommandResult folder = run(config + " --eval " + run_folder.string());
  EXPECT_EQ(folder.status, 2) << folder.output;
  EXPECT_THAT(folder.output, HasSubstr("a run folder, not a checkpoint: name one of its checkpoints/step-N folders"));
}

// The metrics of a checkpoint's evaluation: "test loss ... (N examples)".
std::string eval_metrics(const std::string& output) {
  const auto start = output.find("test loss");
  const auto end = output.find("examples)", start);
  return start == std::string::npos || end == std::string::npos ? "<no evaluation>" : output.substr(start, end - start);
}

// Evaluating needs the model and the tables' rows, not the optimisers' state: a checkpoint
// evaluates alike under other optimizers and their settings, on the shards or in one process.
// It used to fail, blaming the optimizer. Resuming under another optimizer is refused, naming
// both types.
TEST(Cli, ACheckpointEvaluatesUnderAnyOptimizer) {
  std::filesystem::remove_all("/tmp/aiacc_cli_evalopt");
  const std::string job =
      write_temp("aiacc_cli_evalopt.yaml",
                 small_wide_deep_job("evalopt", "") +
                 "optimizer: {type: adam, lr: 0.01}\n"
                 "sparse_optimizer: {type: sgd}\n"
                 "cluster: {workers: 2, servers: 2, placement: [{match: '*', place: ps}]}\n");
  aiacc::testing::CommandResult o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string checkpoint = " --eval /tmp/aiacc_cli_evalopt/evalopt/checkpoints/step-000000000004";
  o = run(job + checkpoint);
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string reference = eval_metrics(o.output);
  EXPECT_THAT(reference, HasSubstr("auc"));
  // sgd's momentum gives its rows state of another width: the type alone does not tell.
  for (const std::string& other : {std::string(" --set optimizer.type=sgd --set sparse_optimizer.momentum=0.9"),
                                   std::string(" --set sparse_optimizer.type=adam"),
                                   std::string(" --set sparse_optimizer.type=ftrl --set cluster.workers=1 "
                                               "--set cluster.servers=0 --set cluster.placement=[]")}) {
    o = run(job + checkpoint + other);
    ASSERT_EQ(o.status, 0) << other << "\n" << o.output;
    EXPECT_EQ(eval_metrics(o.output), reference) << other;
  }
  // A configuration error (status 2), which no restart retries: each restart failed alike.
  o = run(job + " --set optimizer.type=sgd --set train.epochs=2 --set cluster.max_restarts=2");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("(the checkpoint was written with optimizer.type adam; this job has sgd)"));
  EXPECT_THAT(o.output, Not(HasSubstr("restarting the job")));
  // Tables in the workers' own stores: the rows' state of another sparse optimiser was refused
  // naming a tensor's shapes alone, neither the checkpoint nor the setting.
  o = run(job + " --set sparse_optimizer.type=adagrad --set cluster.workers=1 --set cluster.servers=0 "
                "--set cluster.placement=[] --set train.epochs=2");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("step-000000000004: the rows of table"));
  EXPECT_THAT(o.output, HasSubstr("sparse_optimizer.type: sgd -> adagrad"));
  // A layer-wise rule cannot update rows: named under its own section, not optimizer.type.
  expect_config_error(job + " --dry-run --set sparse_optimizer.type=lamb", "sparse_optimizer.type: lamb is a layer-wise");
  std::filesystem::remove_all("/tmp/aiacc_cli_evalopt");
}

// A checkpoint of a bigger model is refused, naming what this model lacks and the changed
// keys: --eval with the deep part turned off scored the wide part alone (AUC 0.62 for a 0.71
// checkpoint), and a dropped cross feature lost its table, both with a generic warning.
TEST(Cli, ACheckpointWithPartsThisModelLacksIsRefused) {
  std::filesystem::remove_all("/tmp/aiacc_cli_parts");
  const std::string job =
      write_temp("aiacc_cli_parts.yaml", small_wide_deep_job("parts", ", cross_features: [C1_x_C2]"));
  aiacc::testing::CommandResult o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string checkpoint = " --eval /tmp/aiacc_cli_parts/parts/checkpoints/step-000000000008";
  o = run(job + checkpoint);
  ASSERT_EQ(o.status, 0) << o.output;
  // Configuration errors (status 2): the config differs from the one that wrote the checkpoint.
  o = run(job + checkpoint + " --set model.wide_deep.deep=false");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("tensor(s) this model does not have: deep."));
  EXPECT_THAT(o.output, HasSubstr("model.wide_deep.deep: true -> false"));
  o = run(job + checkpoint + " --set model.wide_deep.cross_features=[]");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("rows of table(s) this model does not have: wide.C1_x_C2"));
  std::filesystem::remove_all("/tmp/aiacc_cli_parts");
}

// A model without tables refuses a checkpoint holding table rows, as one with tables refuses the
// tables it lacks: only a model with tables compared the checkpoint's tables with its own, so an
// MLP evaluated (and resumed) a checkpoint that held some, saying nothing.
TEST(Cli, AModelWithoutTablesRefusesACheckpointHoldingSome) {
  const std::filesystem::path saved = "/tmp/aiacc_cli_notables";
  const std::filesystem::path with_tables = "/tmp/aiacc_cli_notables_tables";
  std::filesystem::remove_all(saved);
  std::filesystem::remove_all(with_tables);
  const std::string job = write_temp("aiacc_cli_notables.yaml", kSmallJob) + " --set train.epochs=1";
  aiacc::testing::CommandResult o = run(job + " --set job.run_dir=" + saved.string());
  ASSERT_EQ(o.status, 0) << o.output;
  // The MLP's own checkpoint plus rows of a table in its embeddings file and the record of a
  // table on the parameter servers.
  const aiacc::trainer::CheckpointManager original(saved / "cli_test", 0);
  aiacc::trainer::Checkpoint checkpoint = original.load(original.path_for(8));
  checkpoint.files["embeddings"] = {{"wide.C1.ids", aiacc::Tensor::zeros(aiacc::Shape{1}, aiacc::DType::i64)},
                                    {"wide.C1.values", aiacc::Tensor::zeros(aiacc::Shape{1, 1})}};
  checkpoint.state["sharded_tables"] = {"deep.C2"};
  const aiacc::trainer::CheckpointManager tables(with_tables / "cli_test", 0);
  const std::string eval = " --eval " + tables.save(checkpoint).string();
  o = run(job + " --eval " + original.path_for(8).string());
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string refusal = "rows of table(s) this model does not have: wide.C1, deep.C2";
  o = run(job + eval);
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("step-000000000008: the checkpoint holds " + refusal));
  o = run(job + " --set job.run_dir=" + with_tables.string() + " --set train.epochs=2");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr(refusal));
  std::filesystem::remove_all(saved);
  std::filesystem::remove_all(with_tables);
}

// A finished job run again trains nothing: it says why instead of "done: 0 steps".
TEST(Cli, AFinishedJobRunAgainSaysThereIsNothingLeftToTrain) {
  std::filesystem::remove_all("/tmp/aiacc_cli_again");
  const std::string job = write_temp("aiacc_cli_again.yaml", kSmallJob);
  const std::string args = job + " --set job.run_dir=/tmp/aiacc_cli_again --set train.epochs=1";
  auto o = run(args);
  ASSERT_EQ(o.status, 0) << o.output;
  o = run(args);
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("the checkpoint is at step 8, the end of this job's 8 steps (train.epochs 1"));
  o = run(args + " --set train.max_steps=5");
  EXPECT_THAT(o.output, HasSubstr("the checkpoint is at step 8, past this job's 5 steps"));
  std::filesystem::remove_all("/tmp/aiacc_cli_again");
}

// A full disk under job.run_dir fails the job naming metrics.jsonl: it exited 0 with a torn
// last record and every later step's metrics lost.
TEST(Cli, AFullDiskFailsTheJobNamingTheMetricsFile) {
  const std::filesystem::path mount_point = "/tmp/aiacc_cli_full";
  std::filesystem::create_directories(mount_point);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=12k") != 0) {
    GTEST_SKIP() << "cannot mount a 12 KiB tmpfs here (mount: " << std::strerror(errno) << ")";
  }
  const std::string job = write_temp("aiacc_cli_full.yaml", kSmallJob);
  const auto o = run(job + " --set job.run_dir=" + mount_point.string() +
                     " --set train.epochs=40 --set train.log_every_steps=1 --set train.checkpoint.at_end=false "
                     "--set train.eval_each_epoch=false");
  ::umount(mount_point.c_str());
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cannot write the metrics to /tmp/aiacc_cli_full/cli_test/metrics.jsonl: No space left"));
}

TEST(Cli, DryRunPrintsResolvedConfigAndPlan) {
  std::string job = write_temp("aiacc_cli_dry.yaml", kSmallJob);
  aiacc::testing::CommandResult o = run(job + " --set optimizer.lr=0.05 --dry-run");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("lr: 0.05"));
  EXPECT_THAT(o.output, HasSubstr("fc1.weight"));
  EXPECT_THAT(o.output, HasSubstr("steps per epoch"));
}

// A train split of a non-default type without a test split would be evaluated on the default
// data set (Fashion-MNIST's test images, with the same example shape as synthetic images); a
// test split of another kind of example than the train split's is refused naming both.
TEST(Cli, ATestSplitThatCannotMatchTheTrainSplitIsAConfigError) {
  std::string job = write_temp("aiacc_cli_notest.yaml",
                               "data:\n  train: {type: synthetic_images, synthetic_images: {size: 64}}\n");
  aiacc::testing::CommandResult o = run(job + " --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("aiacc_cli_notest.yaml:2:3: data: data.train reads synthetic_images but no "
                                  "data.test is given"));
  std::string ctr_test = write_temp(
      "aiacc_cli_ctrtest.yaml",
      "model: {type: mlp}\n"
      "data:\n  train: {type: synthetic_images, synthetic_images: {size: 64}}\n"
      "  test: {type: synthetic_ctr, synthetic_ctr: {size: 64}}\n");
  o = run(ctr_test + " --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("data.test (type synthetic_ctr) gives binary labels"));
  EXPECT_THAT(o.output, HasSubstr("but data.train (type synthetic_images) gives 10 classes, examples [1, 28, 28]"));
}

// A resume in the middle of an epoch whose example order changed (another seed here) says that
// the rest of the epoch is not the rest of the saved one; with the same order it says nothing.
TEST(Cli, AMidEpochResumeWithAnotherDataOrderIsWarnedAbout) {
  std::filesystem::remove_all("/tmp/aiacc_cli_order");
  std::string job = write_temp("aiacc_cli_order.yaml",
                               "job: {name: order, run_dir: /tmp/aiacc_cli_order, seed: 1}\n"
                               "model: {type: mlp, mlp: {hidden: [8]}}\n"
                               "data:\n  batch_size: 32\n"
                               "  train: {type: synthetic_images, synthetic_images: {size: 256}}\n"
                               "  test: {type: synthetic_images, synthetic_images: {size: 32}}\n"
                               "train: {epochs: 2, eval_each_epoch: false}\n");
  aiacc::testing::CommandResult o = run(job + " --set train.max_steps=3");
  ASSERT_EQ(o.status, 0) << o.output;
  o = run(job + " --set train.max_steps=4");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("this job's order")));
  // The configuration warning names the keys that changed (it used to name none).
  EXPECT_THAT(o.output, HasSubstr("written with a different configuration (train.max_steps: 3 -> 4)"));
  o = run(job + " --set train.max_steps=5 --set job.seed=2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("the checkpoint stopped 128 examples into epoch 1 of an order from "
                                  "{\"seed\":1,\"shuffle\":true,\"train_examples\":256}; this job's order comes from "
                                  "{\"seed\":2,\"shuffle\":true,\"train_examples\":256}"));
  std::filesystem::remove_all("/tmp/aiacc_cli_order");
}

// A dry run of a distributed config plans the job's workers: their steps (the schedule is
// checked against them, as the workers will) and each tensor's placement so far as the rules
// decide it. It used to plan one process: twice the steps, and every tensor "local".
TEST(Cli, ADryRunOfADistributedJobPlansItsWorkers) {
  std::string job = write_temp("aiacc_cli_dist.yaml", std::string(kSmallJob) +
                                                          "cluster: {workers: 2}\n"
                                                          "train: {epochs: 2}\n");
  aiacc::testing::CommandResult o = run(job + " --dry-run");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("batch 32 per worker x 2 workers -> 4 steps per epoch, 8 steps in all"));
  EXPECT_THAT(o.output, HasSubstr("ring: all-reduced over 2 workers"));
  o = run(job + " --dry-run --set optimizer.schedule.type=cosine --set optimizer.schedule.warmup_steps=10");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("total steps 8 leave no room after warmup_steps 10"));
  o = run(job + " --dry-run --set data.drop_last=false");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("data.drop_last: false with 2 workers"));
  o = run(job + " --dry-run --set data.batch_size=200");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("data.batch_size 200 leaves no full batch in 256 training examples for each of 2 "
                                  "workers"));
  // A table placed on ps in a job without servers: refused as the ranks would refuse it.
  o = run(job + " --dry-run --set model.type=wide_deep --set data.train.type=synthetic_ctr "
                "--set data.test.type=synthetic_ctr --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.placement[0]: {match: 'deep.*', place: ps} puts tables on the parameter "
                                  "servers, but cluster.servers is 0"));
  // The dense ring refused this only once its ranks connected: a dry run passed it.
  o = run(job + " --dry-run --set cluster.workers=2 --set cluster.ring.transport=tcp");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ring.transport: tcp sends gradients unencrypted"));
  o = run(job + " --dry-run --set cluster.workers=2 --set cluster.ring.transport=tcp "
                "--set cluster.security.encrypt_ring=false");
  EXPECT_EQ(o.status, 0) << o.output;
}

// One process, train.checkpoint.on_signal: a SIGTERM after step 7 stops the job at the next
// check (step 10), after a checkpoint there, with exit status 143; false: the signal ends it.
TEST(Cli, AStopSignalSavesACheckpointAndExits143) {
  std::filesystem::remove_all("/tmp/aiacc_cli_signal");
  const std::string job = write_temp("aiacc_cli_signal.yaml", std::string(kSmallJob) +
                                                                  "train: {epochs: 10, max_steps: 30, eval_each_epoch: false}\n") +
                          " --set job.run_dir=/tmp/aiacc_cli_signal";
  aiacc::testing::CommandResult o =
      aiacc::testing::run_command("AIACC_TEST_KILL_AT=0:7:term " + g_program + " " + job + " 2>&1");
  EXPECT_EQ(o.status, 143) << o.output;
  EXPECT_THAT(o.output, HasSubstr("got signal 15 (Terminated): stopping after step 10 (the workers' next check)"));
  EXPECT_THAT(o.output, HasSubstr("stopped by signal 15 (Terminated) on 1 of 1 workers after step 10"));
  EXPECT_TRUE(std::filesystem::exists("/tmp/aiacc_cli_signal/cli_test/checkpoints/step-000000000010"));
  o = aiacc::testing::run_command("AIACC_TEST_KILL_AT=0:7:term " + g_program + " " + job +
                                  " --set train.checkpoint.on_signal=false --set train.checkpoint.resume=never "
                                  "--set job.name=off 2>&1");
  EXPECT_EQ(o.status, 128 + 15) << o.output;  // killed by the signal: the shell's 128 + 15
  EXPECT_FALSE(std::filesystem::exists("/tmp/aiacc_cli_signal/off/checkpoints"));
  std::filesystem::remove_all("/tmp/aiacc_cli_signal");
}

// A placement rule that applies to no parameter is a typo: it used to leave the table it meant on
// auto in silence. So is a rule every parameter of which an earlier rule places first.
TEST(Cli, APlacementRuleThatAppliesToNothingIsRefused) {
  const std::string job = write_temp("aiacc_cli_rules.yaml", std::string(kSmallJob) +
                                                                 "cluster: {workers: 2, servers: 1}\n") +
                          " --set model.type=wide_deep --set data.train.type=synthetic_ctr "
                          "--set data.test.type=synthetic_ctr";
  aiacc::testing::CommandResult o = run(job + " --dry-run --set 'cluster.placement=[{match: \"wide.*\", place: ps}]'");
  ASSERT_EQ(o.status, 0) << o.output;
  expect_config_error(job + " --dry-run --set 'cluster.placement=[{match: \"wide.C1\", place: ps}, "
                            "{match: \"deep.C1x\", place: ps}]'",
                      "cluster.placement[1].match: 'deep.C1x' matches no parameter (did you mean 'deep.C1'?); "
                      "the model's parameters are: ");
  expect_config_error(job + " --dry-run --set 'cluster.placement=[{match: \"*.C1\", place: ps}, "
                            "{match: \"wide.C1\", place: ring}]'",
                      "cluster.placement[1].match: 'wide.C1' never applies: earlier rules place all it matches (the "
                      "first matching rule wins): wide.C1 ([0])");
  expect_config_error(job + " --dry-run --set 'cluster.placement=[{match: \"wide.*\", place: ps}, "
                            "{match: \"deep.*\", place: ring}, {match: \"*.C1\", place: ring}]'",
                      "cluster.placement[2].match: '*.C1' never applies: earlier rules place all it matches (the first "
                      "matching rule wins): wide.C1 ([0]), deep.C1 ([1])");
  // ps takes sparse tables only: a rule that puts only dense parameters there did nothing.
  expect_config_error(job + " --dry-run --set 'cluster.placement=[{match: \"deep.fc*\", place: ps}]'",
                      "cluster.placement[0]: 'deep.fc*' places only dense parameters on ps (deep.fc1.weight, ");
  // Consistency settings a job would ignore, or refuse only once started.
  expect_config_error(job + " --dry-run --set cluster.ps.consistency=sync --set cluster.ps.cache_staleness=2",
                      "cluster.ps.cache_staleness: a synchronous table's rows must be this step's");
  expect_config_error(job + " --dry-run --set cluster.ps.consistency=async --set cluster.ps.staleness=3",
                      "cluster.ps.staleness: applies to consistency bounded only (this job's is async)");
  o = run(job + " --dry-run --set cluster.ps.consistency=bounded --set cluster.ps.staleness=3");
  EXPECT_EQ(o.status, 0) << o.output;
  // One process: the rules are not used, but a misspelt one is still a mistake in the config.
  expect_config_error(job + " --dry-run --set cluster.workers=1 --set cluster.servers=0 "
                            "--set 'cluster.placement=[{match: \"wide*C99\", place: ring}]'",
                      "'wide*C99' matches no parameter");
}

// A listener address this host does not have (192.0.2.1 is TEST-NET-1): the error names the key,
// and the local launcher's last line names that first failure, not just the exit status, and
// whose it was: the failed process's own message, or another's by its role (it quoted the
// store's "rendezvous: rank N failed: ...", a job-wide rank: rank 2 of a job of 2 workers is server 0).
TEST(Cli, AnInterfaceThisHostLacksIsNamedWithItsKey) {
  const std::string job = write_temp("cli_interface.yaml", kSmallJob);
  const auto r = run(job + " --set cluster.workers=2 --set cluster.ring.interface=192.0.2.1 --set job.name=cli_iface");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("worker 0: joining the dense ring on cluster.ring.interface 192.0.2.1: zmq_bind"));
  const auto last = r.output.rfind("job failed: worker");
  ASSERT_NE(last, std::string::npos) << r.output;
  const std::string line = r.output.substr(last, r.output.find('\n', last) - last);
  EXPECT_THAT(line, HasSubstr("joining the dense ring on cluster.ring.interface 192.0.2.1"));
  EXPECT_THAT(line, Not(HasSubstr("rendezvous: rank")));
  EXPECT_THAT(line, ::testing::AnyOf(::testing::ContainsRegex("worker [01] \\(pid [0-9]+\\) exited with status [0-9]+: "),
                                     ::testing::ContainsRegex("\\(the first failure, worker [01]'s: ")));
}

// The whole text of `path` ("" when it cannot be read).
std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The records of `path` (metrics.jsonl) of kind `kind`.
std::vector<nlohmann::json> metrics_records(const std::filesystem::path& path, const std::string& kind) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") == kind) records.push_back(std::move(record));
  }
  return records;
}

// The lines of `text` that hold `part`.
std::size_t lines_with(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) count += line.find(part) != std::string::npos ? 1 : 0;
  return count;
}

// A model's parameter-server tables are logged in a line per shard and kind of table, and the
// workers' hot-row caches in one line for the job: each table had a line of its own on every
// shard (registered, and again at the end) and on every worker (its cache), over a hundred for
// a model of 26 fields. The caches' sum equals the per-table counts (still logged at debug
// level) and reaches the summary record. A sync job keeps no cache, which would serve nothing:
// one smaller than a batch's rows failed such a job with a config error.
TEST(Cli, ParameterServerTablesAreLoggedAsOneLineForAll) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_pslog";
  std::filesystem::remove_all(runs);
  const std::string job = write_temp("aiacc_cli_pslog.yaml", small_wide_deep_job("pslog", "")) +
                          " --set job.run_dir=" + runs.string() +
                          " --set cluster.workers=2 --set cluster.servers=2"
                          " --set 'cluster.placement=[{match: \"*\", place: ps}]'";
  const std::string cached = " --set cluster.ps.consistency=async --set cluster.ps.cache_rows=4096"
                             " --set cluster.ps.cache_staleness=2";
  auto o = run(job + " --set job.name=info" + cached);
  ASSERT_EQ(o.status, 0) << o.output;
  // 8 tables (wide and deep, 4 fields) on each of 2 shards: one line per shard for the wide
  // ones (dim 1), one for the deep ones (dim 4), and one per shard at the end.
  EXPECT_EQ(lines_with(o.output, " registered by worker"), 4u) << o.output;
  // At the end (and every log interval of the shards, which a slow run may reach).
  EXPECT_GE(lines_with(o.output, "): 8 tables: "), 2u) << o.output;
  EXPECT_EQ(lines_with(o.output, "): table wide.C1: "), 0u) << o.output;
  EXPECT_EQ(lines_with(o.output, "hot-row cache of "), 0u) << o.output;
  EXPECT_EQ(lines_with(o.output, "hot-row caches of parameter-server rows (8 tables x 2 workers, "
                                 "cluster.ps.cache_rows 4096): "),
            1u)
      << o.output;

  o = run(job + " --set job.name=debug --set 'log.levels={ps: debug}'" + cached);
  ASSERT_EQ(o.status, 0) << o.output;
  std::int64_t served = 0, requested = 0, tables = 0;
  std::istringstream in(o.output);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("): ", line.find("hot-row cache of "));
    if (line.find("hot-row cache of ") == std::string::npos || at == std::string::npos) continue;
    long long s = 0, r = 0;
    ASSERT_EQ(std::sscanf(line.c_str() + at + 3, "%lld of %lld rows served", &s, &r), 2) << line;
    served += s;
    requested += r;
    ++tables;
  }
  EXPECT_EQ(tables, 16) << o.output;  // 8 tables on each of 2 workers
  const auto summaries = metrics_records(runs / "debug" / "metrics.jsonl", "summary");
  ASSERT_EQ(summaries.size(), 1u);
  const nlohmann::json& cache = summaries[0].at("ps_cache");
  EXPECT_EQ(cache.at("tables"), 8);
  EXPECT_EQ(cache.at("served_rows").get<std::int64_t>(), served);
  EXPECT_EQ(cache.at("requested_rows").get<std::int64_t>(), requested);
  EXPECT_GT(served, 0);  // staleness 2 serves rows again
  EXPECT_EQ(cache.at("requested_rows").get<std::int64_t>(),
            served + cache.at("fetched_rows").get<std::int64_t>() + cache.at("refreshed_rows").get<std::int64_t>());

  o = run(job + " --set job.name=sync --set cluster.ps.cache_rows=2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.cache_rows has no effect"));
  EXPECT_THAT(o.output, Not(HasSubstr("hot-row caches of")));
  EXPECT_FALSE(metrics_records(runs / "sync" / "metrics.jsonl", "summary").at(0).contains("ps_cache"));
  std::filesystem::remove_all(runs);
}

// A table replicated on every worker that outgrows cluster.replica_max_mib is warned about once,
// at the progress report where it passes the bound, with its size and rows (rows x (64 + 64
// Adagrad floats) x 4 bytes): the bound applied only to auto placement's start-up estimate, and
// a job without servers replicates every table whatever its size. The wide tables (2 floats a
// row) and a bound the tables stay under give no warning.
TEST(Cli, AReplicatedTablePastTheReplicaBoundIsWarnedAboutOnce) {
  const std::string job = write_temp("aiacc_cli_grown.yaml",
      "job: {name: grown, run_dir: /tmp/aiacc_cli_grown}\n"
      "model: {type: wide_deep, wide_deep: {embedding_dim: 64, hidden: [8]}}\n"
      "data:\n  batch_size: 64\n"
      "  train: {type: synthetic_ctr, synthetic_ctr: {size: 8192, num_categorical: 2, num_integer: 1, vocabulary: 100000}}\n"
      "  test: {type: synthetic_ctr, synthetic_ctr: {size: 128, num_categorical: 2, num_integer: 1, vocabulary: 100000}}\n"
      "train: {epochs: 1, log_every_steps: 16}\n"
      "cluster: {workers: 2, replica_max_mib: 1}\n");
  std::filesystem::remove_all("/tmp/aiacc_cli_grown");
  auto o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  for (const std::string table : {"deep.C1", "deep.C2"}) {
    const std::string start = "table '" + table + "' is replicated on every worker, and its replica has grown to ";
    EXPECT_EQ(lines_with(o.output, start), 1u) << o.output;
    const auto at = o.output.find(start);
    ASSERT_NE(at, std::string::npos);
    double mib = 0;
    long long rows = 0;
    ASSERT_EQ(std::sscanf(o.output.c_str() + at + start.size(), "%lf MiB (%lld rows)", &mib, &rows), 2) << o.output;
    EXPECT_GT(rows, 2048);  // 1 MiB of 512-byte rows
    EXPECT_NEAR(mib, static_cast<double>(rows) * 512 / (1 << 20), 0.006);
    EXPECT_THAT(o.output, HasSubstr(" rows), above cluster.replica_max_mib 1 (the job has no parameter servers); "
                                    "every worker holds all of it: give the job parameter servers"));
  }
  EXPECT_EQ(lines_with(o.output, "is replicated on every worker, and its replica has grown"), 2u) << o.output;
  std::filesystem::remove_all("/tmp/aiacc_cli_grown");
  o = run(job + " --set cluster.replica_max_mib=2");  // ~3000 rows: 1.5 MiB
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("its replica has grown")));
  std::filesystem::remove_all("/tmp/aiacc_cli_grown");
}

// --eval records its result beside the evaluated checkpoint's run, not in the run folder the
// config names (evaluating run a's checkpoint under a config whose job.name is b wrote into b,
// creating it); a checkpoint kept outside a run's checkpoints folder is recorded in the
// config's run folder. The log says where either way.
TEST(Cli, AnEvaluationIsRecordedInTheEvaluatedCheckpointsRun) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_evalrun";
  std::filesystem::remove_all(runs);
  const std::string job = write_temp("aiacc_cli_evalrun.yaml", kSmallJob) + " --set job.run_dir=" + runs.string();
  auto o = run(job + " --set job.name=trained --set train.eval_each_epoch=false");
  ASSERT_EQ(o.status, 0) << o.output;
  const auto checkpoint = runs / "trained" / "checkpoints" / "step-000000000008";
  ASSERT_TRUE(std::filesystem::exists(checkpoint)) << o.output;

  // That run may be training still, its leader amid a record: the evaluation must not cut the
  // file back to its last newline (it did, and the training job's record was lost).
  const auto trained_metrics = runs / "trained" / "metrics.jsonl";
  const std::string in_the_making = R"({"kind":"train","st)";
  { std::ofstream(trained_metrics, std::ios::app) << in_the_making; }
  const std::string before = read_text(trained_metrics);
  o = run(job + " --set job.name=evaluating --eval " + checkpoint.string() + "/");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("evaluation recorded in " + trained_metrics.string() + " (the checkpoint's run)"));
  // Another run name and schedule do not bear on an evaluation: no warning about them.
  EXPECT_THAT(o.output, Not(HasSubstr("different configuration"))) << o.output;
  const std::string after = read_text(trained_metrics);
  ASSERT_TRUE(after.starts_with(before + "\n")) << after;
  ASSERT_TRUE(after.ends_with("\n")) << after;
  const auto eval = nlohmann::json::parse(after.substr(before.size() + 1));
  EXPECT_EQ(eval.at("kind"), "eval_checkpoint");
  EXPECT_EQ(eval.at("step"), 8);
  EXPECT_EQ(eval.at("examples"), 64);
  EXPECT_FALSE(std::filesystem::exists(runs / "evaluating"));

  const auto kept = runs / "kept" / "step-000000000008";
  std::filesystem::create_directories(kept.parent_path());
  std::filesystem::copy(checkpoint, kept, std::filesystem::copy_options::recursive);
  o = run(job + " --set job.name=evaluating --eval " + kept.string());
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("evaluation recorded in " + (runs / "evaluating" / "metrics.jsonl").string() +
                                  " (this job's run folder: the checkpoint is not in a run's checkpoints folder)"));
  EXPECT_EQ(metrics_records(runs / "evaluating" / "metrics.jsonl", "eval_checkpoint").size(), 1u);
  EXPECT_EQ(read_text(trained_metrics), after);
  std::filesystem::remove_all(runs);
}

// Options of a model type the job does not select change nothing: warned about (like
// cluster.ps.* without servers; kept for --set model.type=...) naming each key, where it is
// written and the selected type. They were accepted without a word.
TEST(Cli, OptionsOfAnotherModelTypeAreWarnedAbout) {
  const std::string job = write_temp("aiacc_cli_othermodel.yaml",
                                     "job: {name: cli_test, run_dir: /tmp/aiacc_cli_test}\n"
                                     "model: {type: mlp, mlp: {hidden: [16]}, resnet: {depth: 32}, wide_deep: {}}\n"
                                     "data:\n  batch_size: 32\n"
                                     "  train: {type: synthetic_images, synthetic_images: {size: 256}}\n"
                                     "  test: {type: synthetic_images, synthetic_images: {size: 64}}\n");
  auto o = run(job + " --dry-run --set model.resnet.width=8");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("(changed by --set model.resnet.width=8): model.resnet.depth, model.resnet.width "
                                  "have no effect: model.type is mlp (only the options of the selected type are used)"));
  EXPECT_THAT(o.output, HasSubstr("aiacc_cli_othermodel.yaml:2:"));
  EXPECT_THAT(o.output, HasSubstr(": model.wide_deep has no effect: model.type is mlp"));
  EXPECT_THAT(o.output, Not(HasSubstr("model.mlp")));
  // Switching the type with --set: now the mlp block is the one that changes nothing.
  o = run(job + " --dry-run --set model.type=resnet");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr(": model.mlp.hidden has no effect: model.type is resnet"));
  EXPECT_THAT(o.output, Not(HasSubstr("model.resnet.depth has no effect")));
  o = run(write_temp("aiacc_cli_onemodel.yaml", kSmallJob) + " --dry-run");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("no effect")));
}

// The same for a data split's options of a dataset type it does not read: data.train.criteo_tsv
// beside data.train.type: synthetic_ctr was taken without a word.
TEST(Cli, OptionsOfAnotherDatasetTypeAreWarnedAbout) {
  const std::string job = write_temp("aiacc_cli_otherdata.yaml",
                                     "job: {name: cli_test, run_dir: /tmp/aiacc_cli_test}\n"
                                     "model: {type: mlp, mlp: {hidden: [16]}}\n"
                                     "data:\n  batch_size: 32\n"
                                     "  train: {type: synthetic_images, synthetic_images: {size: 256}, idx_images: {limit: 10}}\n"
                                     "  test: {type: synthetic_images, synthetic_images: {size: 64}}\n");
  auto o = run(job + " --dry-run");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("aiacc_cli_otherdata.yaml:5:"));
  EXPECT_THAT(o.output, HasSubstr(": data.train.idx_images.limit has no effect: data.train.type is synthetic_images "
                                  "(only the options of the selected type are used)"));
  EXPECT_THAT(o.output, Not(HasSubstr("data.train.synthetic_images")));
  EXPECT_THAT(o.output, Not(HasSubstr("data.test")));
  o = run(job + " --dry-run --set data.test.idx_images.limit=5");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("data.test.idx_images.limit has no effect: data.test.type is synthetic_images"));
}

// One process communicates with nobody: its progress records said a few percent of each
// interval went to communication (the local tables' row updates were timed as such) while its
// summary said 0.
TEST(Cli, OneProcessSpendsNoTimeWaitingOnCommunication) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_onewait";
  std::filesystem::remove_all(runs);
  const auto o = run(write_temp("aiacc_cli_onewait.yaml", small_wide_deep_job("onewait", "")) +
                     " --set train.log_every_steps=2 --set train.checkpoint.at_end=false");
  ASSERT_EQ(o.status, 0) << o.output;
  const auto progress = metrics_records(runs / "onewait" / "metrics.jsonl", "train");
  ASSERT_EQ(progress.size(), 4u);
  for (const auto& record : progress) EXPECT_EQ(record.at("comm_wait_share").get<double>(), 0.0) << record.dump();
  const auto summary = metrics_records(runs / "onewait" / "metrics.jsonl", "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].at("comm_wait_share").get<double>(), 0.0);
  std::filesystem::remove_all(runs);
}

// Every record of `path` as "kind:step" ("summary:<steps of the run>"; a partial interval adds
// ":partial<steps>").
std::vector<std::string> record_outline(const std::filesystem::path& path) {
  std::vector<std::string> outline;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    const std::string kind = record.value("kind", "");
    std::string entry = kind + ":" + std::to_string(record.value(kind == "summary" ? "steps" : "step", -1));
    if (record.value("partial", false)) entry += ":partial" + std::to_string(record.at("interval_steps").get<int>());
    outline.push_back(entry);
  }
  return outline;
}

// A run that stops (on a stop signal after step 7, taken at the check of step 10) records the
// steps since its last progress record as a partial interval: they went unrecorded (the records
// jumped from step 8 to the resumed run's 12). And every run opens its records with a run_start
// record, so a resumed run's records read apart from the earlier run's in the same file.
TEST(Cli, AStoppedRunRecordsItsLastStepsAndEveryRunIsMarked) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_partial";
  std::filesystem::remove_all(runs);
  const std::string job = write_temp("aiacc_cli_partial.yaml", kSmallJob) + " --set job.run_dir=" + runs.string() +
                          " --set train.epochs=10 --set train.max_steps=30 --set train.log_every_steps=4"
                          " --set train.eval_each_epoch=false --set train.checkpoint.signal_check_steps=5";
  auto o = aiacc::testing::run_command("AIACC_TEST_KILL_AT=0:7:term " + g_program + " " + job + " 2>&1");
  ASSERT_EQ(o.status, 143) << o.output;
  EXPECT_THAT(o.output, HasSubstr("(the last 2 steps: the job stops here)"));
  o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  const auto metrics = runs / "cli_test" / "metrics.jsonl";
  EXPECT_EQ(record_outline(metrics),
            (std::vector<std::string>{"run_start:0", "train:4", "train:8", "train:10:partial2", "summary:10",
                                      "run_start:10", "train:12", "train:16", "train:20", "train:24", "train:28",
                                      "train:30", "summary:20"}));
  const auto starts = metrics_records(metrics, "run_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_TRUE(starts[0].at("resumed_from").is_null());
  EXPECT_EQ(starts[1].at("resumed_from"), (runs / "cli_test" / "checkpoints" / "step-000000000010").string());
  EXPECT_EQ(starts[1].at("total_steps"), 30);
  EXPECT_FALSE(starts[1].contains("restart"));  // not started again by the launcher
  std::filesystem::remove_all(runs);
}

// train.checkpoint.resume: never beside an earlier run is refused, naming the folder, the keys
// that name it and how to start afresh, even when this run saves no checkpoint (it appended its
// records to the old run's and replaced the config.yaml that described the old checkpoints);
// overwrite removes the earlier run's files first. A resumed run's trace gets a name of its own
// (it replaced the earlier run's trace.json).
TEST(Cli, AFreshStartBesideAnEarlierRunIsRefusedUnlessItOverwritesIt) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_fresh";
  const std::filesystem::path folder = runs / "cli_test";
  std::filesystem::remove_all(runs);
  const std::string job = write_temp("aiacc_cli_fresh.yaml", kSmallJob) + " --set job.run_dir=" + runs.string() +
                          " --set train.trace=true --set train.eval_each_epoch=false";
  auto o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  ASSERT_TRUE(std::filesystem::exists(folder / "trace.json"));
  const std::string trace = read_text(folder / "trace.json"), config = read_text(folder / "config.yaml"),
                    metrics = read_text(folder / "metrics.jsonl");

  o = run(job + " --set train.checkpoint.resume=never --set train.checkpoint.at_end=false");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("train.checkpoint.resume: never starts afresh, but the run folder "
                                  "/tmp/aiacc_cli_fresh/cli_test (job.run_dir /tmp/aiacc_cli_fresh, job.name cli_test) "
                                  "holds an earlier run: 1 checkpoint(s) (newest step-000000000008) and 3 records in "
                                  "metrics.jsonl; to start afresh set another job.name or job.run_dir (e.g. --set "
                                  "job.name=cli_test-2), or set train.checkpoint.resume: overwrite"));
  EXPECT_EQ(read_text(folder / "config.yaml"), config);
  EXPECT_EQ(read_text(folder / "metrics.jsonl"), metrics);

  o = run(job + " --set train.epochs=2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("resumed from"));
  EXPECT_THAT(o.output, HasSubstr((folder / "trace-step-8.json").string()));
  EXPECT_EQ(read_text(folder / "trace.json"), trace);
  const auto starts = metrics_records(folder / "metrics.jsonl", "run_start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0].at("trace"), "trace.json");
  EXPECT_EQ(starts[1].at("trace"), "trace-step-8.json");

  o = run(job + " --set train.checkpoint.resume=overwrite");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("train.checkpoint.resume: overwrite: removed the earlier run's checkpoints, "
                                  "metrics.jsonl, config.yaml, trace"));
  EXPECT_FALSE(std::filesystem::exists(folder / "checkpoints" / "step-000000000016"));
  EXPECT_TRUE(std::filesystem::exists(folder / "checkpoints" / "step-000000000008"));
  EXPECT_FALSE(std::filesystem::exists(folder / "trace-step-8.json"));
  EXPECT_EQ(record_outline(folder / "metrics.jsonl"),
            (std::vector<std::string>{"run_start:0", "train:8", "summary:8"}));
  std::filesystem::remove_all(runs);
}

// The summary's samples/s leaves out the run's first step, whose start-up (the loader's first
// batch, the first collectives) is no measure of the job's speed (a 300-step flights run
// reported half its steady throughput); it keeps the whole time and the all-steps figure too.
// A run of one step has nothing to leave out.
TEST(Cli, ThroughputIsMeasuredAfterTheFirstStep) {
  const std::filesystem::path runs = "/tmp/aiacc_cli_steady";
  std::filesystem::remove_all(runs);
  const std::string job = write_temp("aiacc_cli_steady.yaml", kSmallJob) + " --set job.run_dir=" + runs.string() +
                          " --set train.eval_each_epoch=false --set train.checkpoint.at_end=false";
  auto o = run(job);
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("samples/s after the first step ("));
  auto summary = metrics_records(runs / "cli_test" / "metrics.jsonl", "summary");
  ASSERT_EQ(summary.size(), 1u);
  const nlohmann::json& r = summary[0];
  ASSERT_EQ(r.at("steps"), 8);
  EXPECT_EQ(r.at("warmup_steps"), 1);
  const double seconds = r.at("seconds").get<double>(), warmup = r.at("warmup_seconds").get<double>();
  EXPECT_GT(warmup, 0.0);
  EXPECT_LT(warmup, seconds);
  const double steady = r.at("samples_per_s").get<double>(), all = r.at("samples_per_s_all_steps").get<double>();
  EXPECT_NEAR(steady, 7 * 32 / (seconds - warmup), 1e-9 * steady);
  EXPECT_NEAR(all, 8 * 32 / seconds, 1e-9 * all);

  o = run(job + " --set train.max_steps=1 --set job.name=one_step");
  ASSERT_EQ(o.status, 0) << o.output;
  summary = metrics_records(runs / "one_step" / "metrics.jsonl", "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].at("warmup_steps"), 0);
  EXPECT_EQ(summary[0].at("samples_per_s"), summary[0].at("samples_per_s_all_steps"));
  std::filesystem::remove_all(runs);
}

// A small Wide&Deep job of 2 workers (4 steps an epoch) in /tmp/aiacc_cli_<name>, its deep.*
// tables on `servers` parameter-server shards when there are any.
std::string two_worker_wide_deep(const std::string& name, int servers) {
  return write_temp("aiacc_cli_" + name + ".yaml", small_wide_deep_job(name, "")) +
         " --set cluster.workers=2 --set cluster.servers=" + std::to_string(servers) +
         (servers > 0 ? " --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'" : "");
}

// The share of the all-reduce "hidden" is the share the training thread did not wait for: with
// tables on parameter servers that is behind backward and the row pushes and prefetch that come
// after it, not behind backward alone (the summary said "behind backward", 99%, where the trace
// showed 3%), and the summary says which. A launcher's restart marks its run's records (the
// restart wrote step records again with nothing between the runs).
TEST(Cli, TheSummarySaysWhatTheAllReduceHidBehindAndARestartIsMarked) {
  const std::filesystem::path ps_runs = "/tmp/aiacc_cli_hidden_ps";
  std::filesystem::remove_all(ps_runs);
  auto o = aiacc::testing::run_command(
      "AIACC_TEST_KILL_AT=1:5 " + g_program + " " + two_worker_wide_deep("hidden_ps", 1) +
      " --set train.epochs=3 --set train.checkpoint.every_steps=2 --set train.log_every_steps=2"
      " --set cluster.max_restarts=1 --set train.eval_each_epoch=false 2>&1");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("restarting the job (restart 1 of 1), from its newest complete checkpoint if it has one"));
  EXPECT_THAT(o.output, Not(HasSubstr("no complete checkpoint")));
  EXPECT_THAT(o.output, HasSubstr("% of gradient all-reduce time hidden (not waited for: it ran behind backward, the "
                                  "row pushes and the next batch's prefetch)"));
  EXPECT_THAT(o.output, Not(HasSubstr("hold nothing")));
  const auto metrics = ps_runs / "hidden_ps" / "metrics.jsonl";
  const auto starts = metrics_records(metrics, "run_start");
  ASSERT_EQ(starts.size(), 2u) << read_text(metrics);
  EXPECT_EQ(starts[0].at("step"), 0);
  EXPECT_FALSE(starts[0].contains("restart"));
  EXPECT_EQ(starts[1].at("step"), 4);
  EXPECT_EQ(starts[1].at("restart"), 1);
  EXPECT_EQ(starts[1].at("resumed_from"), (ps_runs / "hidden_ps" / "checkpoints" / "step-000000000004").string());
  EXPECT_EQ(record_outline(metrics), (std::vector<std::string>{"run_start:0", "train:2", "train:4", "run_start:4",
                                                               "train:6", "train:8", "train:10", "train:12",
                                                               "summary:8"}));
  const auto summary = metrics_records(metrics, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].at("allreduce_hidden_behind"), "backward, the row pushes and the next batch's prefetch");

  const std::filesystem::path ring_runs = "/tmp/aiacc_cli_hidden_ring";
  std::filesystem::remove_all(ring_runs);
  o = run(two_worker_wide_deep("hidden_ring", 0));
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("% of gradient all-reduce time hidden (not waited for: it ran behind backward)"));
  const auto ring_summary = metrics_records(ring_runs / "hidden_ring" / "metrics.jsonl", "summary");
  ASSERT_EQ(ring_summary.size(), 1u);
  EXPECT_EQ(ring_summary[0].at("allreduce_hidden_behind"), "backward");

  // A restart with no checkpoint to resume from says it trains again from step 0 (it did so in
  // silence after a message about the newest checkpoint).
  std::filesystem::remove_all(ps_runs);
  o = aiacc::testing::run_command(
      "AIACC_TEST_KILL_AT=1:5 " + g_program + " " + two_worker_wide_deep("hidden_ps", 1) +
      " --set train.epochs=3 --set train.checkpoint.every_steps=0 --set cluster.max_restarts=1"
      " --set train.eval_each_epoch=false 2>&1");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("restart 1: no complete checkpoint in " + (ps_runs / "hidden_ps" / "checkpoints").string() +
                                  ": training again from step 0 (train.checkpoint.every_steps is 0"));
  std::filesystem::remove_all(ps_runs);
  std::filesystem::remove_all(ring_runs);
}

// Parameter-server shards with nothing to hold (a model without tables, or every table placed
// on the ring) started without a word: warned about once, naming cluster.servers and why.
TEST(Cli, ParameterServersThatHoldNothingAreWarnedAboutOnce) {
  std::filesystem::remove_all("/tmp/aiacc_cli_idle");
  const std::string job = write_temp("aiacc_cli_idle.yaml", kSmallJob) +
                          " --set job.run_dir=/tmp/aiacc_cli_idle --set train.max_steps=2";
  auto o = run(job + " --set cluster.servers=2");
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string warning = "cluster.servers: 2 starts 2 parameter-server shard(s) that hold nothing: model.type mlp "
                              "has no embedding tables";
  EXPECT_THAT(o.output, HasSubstr(warning));
  EXPECT_EQ(o.output.find(warning), o.output.rfind(warning)) << "warned more than once";

  std::filesystem::remove_all("/tmp/aiacc_cli_idle_ring");
  o = run(write_temp("aiacc_cli_idle_ring.yaml", small_wide_deep_job("idle_ring", "")) +
          " --set cluster.workers=2 --set cluster.servers=1 --set 'cluster.placement=[{match: \"*\", place: ring}]'");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.servers: 1 starts 1 parameter-server shard(s) that hold nothing: all 8 "
                                  "embedding tables are placed on the ring (8 by cluster.placement rules)"));
  std::filesystem::remove_all("/tmp/aiacc_cli_idle");
  std::filesystem::remove_all("/tmp/aiacc_cli_idle_ring");
}

// Hot-row cache settings that serve nothing were taken without a word: cache_staleness without
// cache_rows, and a cache for synchronous tables (which take only this step's rows).
TEST(Cli, HotRowCacheSettingsThatServeNothingAreWarnedAbout) {
  const std::string job = write_temp("aiacc_cli_cache.yaml", small_wide_deep_job("cache", "")) +
                          " --dry-run --set cluster.workers=2 --set cluster.servers=2";
  auto o = run(job + " --set cluster.ps.consistency=async --set cluster.ps.cache_staleness=2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.cache_staleness has no effect: cluster.ps.cache_rows is 0"));
  o = run(job + " --set cluster.ps.cache_rows=4096");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.cache_rows has no effect: consistency sync takes only this step's rows"));
  o = run(job + " --set cluster.ps.consistency=async --set cluster.ps.cache_rows=4096 --set cluster.ps.cache_staleness=2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("no effect")));
}

// cluster.sync_batch_norm on a model without batch norm synchronised nothing without a word.
TEST(Cli, SyncBatchNormOnAModelWithoutBatchNormIsWarnedAbout) {
  const std::string warning = "cluster.sync_batch_norm has no effect: model.type ";
  const std::string mlp = write_temp("aiacc_cli_syncbn.yaml", kSmallJob);
  auto o = run(mlp + " --dry-run --set cluster.workers=2 --set cluster.sync_batch_norm=true");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr(warning + "mlp has no batch-norm layer, so there are no batch statistics to "
                                            "synchronise"));
  o = run(write_temp("aiacc_cli_syncbn_wd.yaml", small_wide_deep_job("syncbn", "")) +
          " --dry-run --set cluster.sync_batch_norm=true");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr(warning + "wide_deep has no batch-norm layer"));
  // A ResNet's batch norms are what it synchronises: no warning.
  o = run(mlp + " --dry-run --set cluster.workers=2 --set cluster.sync_batch_norm=true --set model.type=resnet "
                "--set model.resnet.depth=8 --set model.resnet.width=4");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("cluster.sync_batch_norm")));
  // One worker has no other worker's statistics to take.
  o = run(mlp + " --dry-run --set cluster.workers=1 --set cluster.sync_batch_norm=true --set model.type=resnet "
                "--set model.resnet.depth=8 --set model.resnet.width=4");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.sync_batch_norm has no effect: the job has one worker (cluster.workers 1)"));
}

// A reconnect grace above cluster.ps.timeout_s is cut to timeout_s (the clients and the shards
// both cap it): it was taken without a word.
TEST(Cli, AReconnectGraceAboveThePsTimeoutIsWarnedAbout) {
  const std::string job = write_temp("aiacc_cli_grace.yaml", small_wide_deep_job("grace", "")) +
                          " --dry-run --set cluster.workers=2 --set cluster.servers=1 --set cluster.ps.timeout_s=30";
  auto o = run(job + " --set cluster.ps.reconnect_grace_s=60");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.reconnect_grace_s: 60 is above cluster.ps.timeout_s: 30, which caps "
                                  "it: a dropped connection between a worker and a shard fails the job after 30 s"));
  o = run(job + " --set cluster.ps.reconnect_grace_s=30");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("which caps it")));
}

// A min_count no id can reach within the job (a worker pulls an id at most once a micro-batch) left
// every parameter-server table at its initial values without a word: warned about once, by the
// job's workers and steps, and only where tables are on the servers.
TEST(Cli, AnAdmissionCountNoIdCanReachIsWarnedAboutOnce) {
  // 512 examples in batches of 64 over 2 workers: 4 steps each. A sync shard counts at most 2
  // pulls and 1 merged push of an id a step (12 requests); async ones 2 pulls and 2 pushes (16).
  const std::string job = write_temp("aiacc_cli_admission.yaml", small_wide_deep_job("admission", "")) +
                          " --set cluster.workers=2 --set cluster.servers=1 --set 'cluster.placement=[{match: \"deep.*\", "
                          "place: ps}]'";
  const std::string warning = "cluster.ps.min_count: 13 exceeds the 12 requests an id can get in this job (4 steps x "
                              "(2 workers' pulls + 1 push), each worker pulling and pushing an id at most once a "
                              "step, a sync step's pushes applied as one): the parameter servers never create a row of ";
  auto o = run(job + " --dry-run --set cluster.ps.min_count=13");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr(warning));
  EXPECT_THAT(o.output, HasSubstr("so every pull returns the initial values and the tables never learn"));
  o = run(job + " --dry-run --set cluster.ps.min_count=12");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("cluster.ps.min_count")));
  o = run(job + " --dry-run --set cluster.ps.min_count=17 --set cluster.ps.consistency=async");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.min_count: 17 exceeds the 16 requests an id can get in this job (4 "
                                  "steps x (2 workers x 2), each worker pulling and pushing an id at most once a step)"));
  EXPECT_THAT(o.output, HasSubstr("the parameter servers never create a row of deep."));
  EXPECT_THAT(o.output, Not(HasSubstr("never create a row of wide."))) << "auto placement's choice is the workers'";
  o = run(job + " --dry-run --set cluster.ps.min_count=16 --set cluster.ps.consistency=async");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("cluster.ps.min_count")));
  // Two micro-batches a step (gradient accumulation): 2 steps, each pulling an id in both of its
  // micro-batches and pushing it once: sync 2 x (2 x 2 + 1) = 10 requests.
  const std::string accumulating = " --dry-run --set train.gradient_accumulation_steps=2 --set cluster.ps.min_count=";
  o = run(job + accumulating + "11");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("cluster.ps.min_count: 11 exceeds the 10 requests an id can get in this job (2 "
                                  "steps x (2 workers x 2 pulls + 1 push), each worker pulling an id at most once in "
                                  "each of a step's 2 micro-batches and pushing it at most once a step, a sync step's "
                                  "pushes applied as one)"));
  o = run(job + accumulating + "10");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("cluster.ps.min_count")));
  // Every table on the ring: the servers admit nothing, so min_count is not in effect.
  o = run(job + " --dry-run --set cluster.ps.min_count=13 --set 'cluster.placement=[{match: \"*\", place: ring}]'");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("cluster.ps.min_count")));
  // The job itself: once (by worker 0), with the steps max_steps leaves.
  std::filesystem::remove_all("/tmp/aiacc_cli_admission");
  o = run(job + " --set cluster.ps.min_count=7 --set train.max_steps=2 --set train.eval_each_epoch=false "
                "--set 'cluster.placement=[{match: \"*\", place: ps}]'");
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string job_warning = "cluster.ps.min_count: 7 exceeds the 6 requests an id can get in this job (2 steps x "
                                  "(2 workers' pulls + 1 push)";
  EXPECT_THAT(o.output, HasSubstr(job_warning));
  EXPECT_EQ(o.output.find(job_warning), o.output.rfind(job_warning)) << "warned more than once";
  std::filesystem::remove_all("/tmp/aiacc_cli_admission");
}

// aiacc-bench train's E compares the runs' steady throughput, each run's summary samples/s
// (after its first step): it averaged the progress intervals after the first, whatever the
// summaries said. Run here against a stand-in aiacc-train beside a copy of the bench, which
// writes the records a run would, with intervals at 1000 samples/s and summaries saying 2000
// (1 worker) and 3000 (2 workers); a run folder that already holds records is refused, as
// resume: never refuses it (--repeat reused the folders).
TEST(Cli, TheTrainBenchComparesTheRunsSteadyThroughput) {
  const std::filesystem::path bench = std::filesystem::path(g_program).parent_path() / "aiacc-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "this build has no aiacc-bench (meson option benchmarks)";
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
    GTEST_SKIP() << "the bench pins 2 workers to cores 0-1";
  }
  const std::filesystem::path dir = "/tmp/aiacc_cli_train_bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(bench, dir / "aiacc-bench");
  std::ofstream(dir / "aiacc-train") << R"(#!/bin/bash
for arg; do
  case "$arg" in
    job.run_dir=*) run_dir=${arg#*=} ;;
    job.name=*) name=${arg#*=} ;;
    cluster.workers=*) workers=${arg#*=} ;;
  esac
done
mkdir -p "$run_dir/$name"
m="$run_dir/$name/metrics.jsonl"
if [ -s "$m" ]; then echo "train.checkpoint.resume: never starts afresh, but $m holds records"; exit 2; fi
steady=$(( workers == 1 ? 2000 : 3000 ))
{
  echo '{"kind":"run_start","step":0}'
  echo '{"kind":"train","step":2,"samples_per_s":100}'
  for step in 4 6 8; do echo "{\"kind\":\"train\",\"step\":$step,\"samples_per_s\":1000}"; done
  echo "{\"kind\":\"summary\",\"steps\":8,\"samples_per_s\":$steady,\"samples_per_s_all_steps\":900,\"warmup_seconds\":0.25,\"comm_wait_share\":0.1,\"allreduce_hidden_share\":0.5,\"allreduce_hidden_behind\":\"backward, the row pushes\"}"
} >> "$m"
)";
  std::filesystem::permissions(dir / "aiacc-train", std::filesystem::perms::owner_all);
  const auto o = aiacc::testing::run_command((dir / "aiacc-bench").string() + " train " +
                                             write_temp("aiacc_cli_bench.yaml", kSmallJob) + " --steps 20 --repeat 2 --json " +
                                             (dir / "out.json").string() + " 2>&1");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("scaling efficiency E = 3000.0 / (2 x 2000.0) = 0.750"));
  EXPECT_THAT(o.output, HasSubstr("samples/s: after each run's first step (its start-up took 0.25 s with 1 worker"));
  EXPECT_THAT(o.output, HasSubstr("all-reduce hidden: the share of gradient all-reduce time not waited for (it ran "
                                  "behind backward, the row pushes)"));
  const auto results = nlohmann::json::parse(read_text(dir / "out.json"));
  EXPECT_EQ(results.at("samples_per_s_1"), 2000.0);
  EXPECT_EQ(results.at("samples_per_s_n"), 3000.0);
  EXPECT_EQ(results.at("allreduce_hidden_behind"), "backward, the row pushes");
  std::filesystem::remove_all(dir);
}

// A missing data file is a configuration error (exit 2: no restart mends it) naming the key.
TEST(Cli, MissingDataFileIsAConfigErrorNamingIt) {
  std::string job = write_temp("aiacc_cli_data.yaml",
                               "data:\n  train: {type: idx_images, idx_images: {directory: /nonexistent}}\n");
  aiacc::testing::CommandResult o = run(job + " --dry-run");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("/nonexistent"));
  EXPECT_THAT(o.output, HasSubstr("data.train.idx_images"));
}

// Tables placed on parameter servers a job does not have (cluster.servers: 0): one configuration
// error, before any rank starts or a dry run prints its plan. Each rank used to find it on its
// own after building its model, and a dry run after printing the configuration and part of the
// plan. The job: the small Wide&Deep job (tables deep.C1-4, wide.C1-4) on 2 workers.
std::string ps_placement_job() {
  return write_temp("aiacc_cli_ps_placement.yaml", small_wide_deep_job("ps_placement", "")) +
         " --set cluster.workers=2";
}

aiacc::testing::CommandResult run_ps_placement(const std::string& arguments) {
  return run(ps_placement_job() + " " + arguments);
}

std::size_t count(const std::string& text, const std::string& phrase) {
  std::size_t n = 0;
  for (std::size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + 1)) ++n;
  return n;
}

constexpr const char* kDeepOnPs =
    "cluster.placement[0]: {match: 'deep.*', place: ps} puts tables on the parameter servers, but cluster.servers "
    "is 0 (the job starts none); set cluster.servers to 1 or more, or place them on the ring (place: ring)";

TEST(Cli, ARunRefusesTablesOnServersItHasNoneOfBeforeAnyRankStarts) {
  const auto o = run_ps_placement("--set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("started 2 workers"))) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("[worker "))) << o.output;
}

TEST(Cli, ADryRunRefusesTablesOnServersItHasNoneOfBeforeItsPlan) {
  auto o = run_ps_placement("--dry-run --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("# plan"))) << o.output;
  // Nor is a cluster job emitted whose every rank would refuse it.
  o = run_ps_placement("--emit slurm --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("#SBATCH"))) << o.output;
  // Every table, by a later rule: the first rule that places on ps is named.
  o = run_ps_placement("--dry-run --set 'cluster.placement=[{match: \"wide.C1\", place: ring}, {match: \"*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("config error: cluster.placement[1]: {match: '*', place: ps} puts tables on the "
                                  "parameter servers, but cluster.servers is 0"));
}

// What stays as it was: auto places every table on the ring without servers (it never picks ps),
// ring rules need none, one process uses no rules, and with a server the ps rule plans.
TEST(Cli, AutoPlacementAndRingRulesNeedNoServers) {
  auto o = run_ps_placement("--dry-run");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(count(o.output, "ring: replicated (no servers)"), 8u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("ps (placement rule)"))) << o.output;
  o = run_ps_placement("--dry-run --set 'cluster.placement=[{match: \"deep.*\", place: ring}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  o = run_ps_placement("--dry-run --set cluster.workers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  o = run_ps_placement("--dry-run --set cluster.servers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(count(o.output, "ps (placement rule)"), 4u) << o.output;
  o = run_ps_placement("--emit slurm --set cluster.servers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("#SBATCH")) << o.output;
}

}  // namespace

// The real CUDA plugin (libaiacc_cuda.so next to the program, where this build has nvcc) loads:
// every core and ring symbol it needs is in the program. Without a GPU the job then stops with
// the device count; on a GPU it trains. A missing symbol would show only on GPU machines
// otherwise, as dlopen's "undefined symbol".
TEST(Cli, TheCudaPluginLoadsAgainstTheProgram) {
  const auto plugin = std::filesystem::path(g_program).parent_path() / "libaiacc_cuda.so";
  if (!std::filesystem::exists(plugin)) GTEST_SKIP() << "this build has no CUDA plugin (" << plugin << ")";
  std::string job = write_temp("aiacc_cli_cuda.yaml", kSmallJob);
  aiacc::testing::CommandResult o = aiacc::testing::run_command(
      "env -u AIACC_CUDA_PLUGIN " + g_program + " " + job +
      " --set job.device=cuda --set train.max_steps=2 --set train.eval_each_epoch=false 2>&1");
  EXPECT_THAT(o.output, ::testing::Not(HasSubstr("cannot load the CUDA plugin"))) << o.output;
  EXPECT_THAT(o.output, ::testing::Not(HasSubstr("undefined symbol"))) << o.output;
  if (o.status != 0) {
    EXPECT_THAT(o.output, HasSubstr("job.device: cuda:0: this machine has 0 CUDA device(s)"));
  }
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_AIACC_TRAIN\n", argv[0]);
    return 1;
  }
  g_program = argv[1];
  return RUN_ALL_TESTS();
}
