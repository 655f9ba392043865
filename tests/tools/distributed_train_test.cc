// The distributed trainer end to end, through the real aiacc-train program (path in argv[1]):
// every job runs as separate processes (the local launcher, or mpirun), and the final
// checkpoints are compared tensor by tensor against a reference run.
//   - equivalence: 2 synchronous workers with batch B equal 1 worker with batch 2B after 20
//     steps (fp32 wire), for all-dense models (ring only: an MLP, and ResNet-20 with
//     synchronised batch norm, from a warm checkpoint) and for Wide&Deep with its embedding
//     tables on 2 parameter-server shards and the dense part on the ring;
//   - placement: tables forced to the ring, forced to the servers, mixed and auto all train
//     to the same values;
//   - failure: a worker killed mid-job stops the job, and the launcher names it;
//   - kill and resume: the job restarted from its last checkpoint ends where an uninterrupted
//     job ends;
//   - mpirun -np 3 runs the same job (when OpenMPI's mpirun is installed).
#include <gmock/gmock.h>
#include <csignal>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/io/safetensors.h"
#include "core/util/cpus.h"
#include "core/net/rendezvous_client.h"
#include "tests/testing/cpu_quota_group.h"
#include "tests/testing/process.h"
#include "tools/trainer/process_group.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string g_program;
std::string g_fake_cuda_plugin;  // argv[2]: tests/testing/fake_cuda_plugin.cc's library

fs::path scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("aiacc_dist_test_{}", ::getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

constexpr int kSteps = 20;

// Wide&Deep on synthetic CTR data: 53 sparse tables, a small MLP; SGD with momentum on the
// dense part, Adagrad (or SGD) on the rows. Comparing batch splits (1 x 2B vs 2 x B) uses SGD
// rows: Adagrad's first update of a row is lr * g / |g|, so a row whose gradient sums to
// nearly zero flips with the summation order (rounding, not a bug); runs that split the batch
// alike are compared with Adagrad.
std::string wide_deep_job(const std::string& name, int batch, const std::string& cluster,
                          const std::string& sparse_optimizer = "adagrad") {
  return fmt::format(R"(job: {{name: {}, run_dir: {}, seed: 3}}
model:
  type: wide_deep
  wide_deep: {{embedding_dim: 4, hidden: [16], dropout: 0.0, cross_features: [C1_x_C2]}}
data:
  batch_size: {}
  shuffle: true
  train: {{type: synthetic_ctr, synthetic_ctr: {{num_integer: 13, num_categorical: 26, vocabulary: 300, size: 8000}}}}
  test: {{type: synthetic_ctr, synthetic_ctr: {{num_integer: 13, num_categorical: 26, vocabulary: 300, size: 500}}}}
optimizer: {{type: sgd, lr: 0.05, momentum: 0.9}}
sparse_optimizer: {{type: {}, lr: 0.05}}
train: {{epochs: 1, max_steps: {}, log_every_steps: 10, eval_each_epoch: false,
        checkpoint: {{every_steps: 10, at_end: true, resume: auto}}}}
cluster:
{}
)",
                     name, scratch().string(), batch, sparse_optimizer, kSteps, cluster);
}

// An all-dense model (the ring only): an MLP on synthetic images.
std::string mlp_job(const std::string& name, int batch, const std::string& cluster) {
  return fmt::format(R"(job: {{name: {}, run_dir: {}, seed: 5}}
model: {{type: mlp, mlp: {{hidden: [64, 32]}}}}
data:
  batch_size: {}
  train: {{type: synthetic_images, synthetic_images: {{size: 2048}}}}
  test: {{type: synthetic_images, synthetic_images: {{size: 128}}}}
optimizer: {{type: sgd, lr: 0.05, momentum: 0.9}}
train: {{epochs: 1, max_steps: {}, log_every_steps: 10, eval_each_epoch: false,
        checkpoint: {{at_end: true, resume: never}}}}
cluster:
{}
)",
                     name, scratch().string(), batch, kSteps, cluster);
}

struct Run {
  int status = -1;
  std::string output;
};

// Outer launchers (torchrun-style variables, mpirun) pass the job token in the environment.
constexpr const char* kTokenEnv = "AIACC_JOB_TOKEN=distributed-train-test-token-0123456789";

// The torchrun-style variables of a loopback job of `world` ranks (prefix each rank's command
// with RANK=r and these), with this job's token unless `token` is false. `salt` gives each test
// its own port, so tests that run back to back never meet a store still closing.
// A rendezvous port below Linux's ephemeral range (32768-60999 by default): there, the local
// port of any connection another test process opened could already hold it.
int rendezvous_port(int salt) { return 20000 + (::getpid() + salt) % 12000; }

std::string external_env(int world, int salt, bool token = true) {
  const int port = rendezvous_port(salt);
  return fmt::format("{} WORLD_SIZE={} MASTER_ADDR=127.0.0.1 MASTER_PORT={}", token ? kTokenEnv : "",
                     world, port);
}

Run train(const std::string& name, const std::string& yaml, const std::string& env = "",
          const std::string& launcher = "", const std::string& args = "") {
  const fs::path config = scratch() / (name + ".yaml");
  std::ofstream(config) << yaml;
  auto r = aiacc::testing::run_command(
      fmt::format("{} {} {} {} {} 2>&1", env, launcher, g_program, config.string(), args));
  return {r.status, r.output};
}

// Every tensor of the final checkpoint, by "<file>/<tensor>" ("model/...", "optimizer/..."),
// except embedding rows, which are by table whatever file holds them (the workers' embeddings
// file, or the parameter-server shards' own files): "table/<name>.ids" (sorted), ".values",
// ".state" in id order, so placements that keep rows in different files compare alike.
std::map<std::string, aiacc::Tensor> final_checkpoint(const std::string& name, int steps = kSteps) {
  const fs::path dir = scratch() / name / "checkpoints" / fmt::format("step-{:012d}", steps);
  std::map<std::string, aiacc::Tensor> out;
  struct TableRows {
    std::vector<std::int64_t> ids;
    std::vector<std::vector<float>> values, state;
    std::int64_t dim = 0, state_floats = 0;
  };
  std::map<std::string, TableRows> tables;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string stem = entry.path().stem().string();
    auto file = aiacc::io::read_safetensors(entry.path().string());
    if (stem != "embeddings" && stem.rfind("ps-shard-", 0) != 0) {
      for (auto& [tensor_name, tensor] : file.tensors) out.emplace(stem + "/" + tensor_name, tensor);
      continue;
    }
    std::map<std::string, const aiacc::Tensor*> by_name;
    for (auto& [tensor_name, tensor] : file.tensors) by_name[tensor_name] = &tensor;
    for (auto& [tensor_name, tensor] : file.tensors) {
      if (!tensor_name.ends_with(".ids")) continue;
      const std::string table = tensor_name.substr(0, tensor_name.size() - 4);
      const aiacc::Tensor& values = *by_name.at(table + ".values");
      const aiacc::Tensor& state = *by_name.at(table + ".state");
      TableRows& rows = tables[table];
      rows.dim = values.dim(1);
      rows.state_floats = state.dim(1);
      for (std::int64_t r = 0; r < tensor.numel(); ++r) {
        rows.ids.push_back(tensor.data<std::int64_t>()[r]);
        rows.values.emplace_back(values.data<float>() + r * rows.dim, values.data<float>() + (r + 1) * rows.dim);
        rows.state.emplace_back(state.data<float>() + r * rows.state_floats,
                                state.data<float>() + (r + 1) * rows.state_floats);
      }
    }
  }
  for (auto& [table, rows] : tables) {
    std::vector<std::size_t> order(rows.ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rows.ids[a] < rows.ids[b]; });
    const auto n = static_cast<std::int64_t>(order.size());
    aiacc::Tensor ids = aiacc::Tensor::empty(aiacc::Shape{n}, aiacc::DType::i64);
    aiacc::Tensor values = aiacc::Tensor::empty(aiacc::Shape{n, rows.dim}, aiacc::DType::f32);
    aiacc::Tensor state = aiacc::Tensor::empty(aiacc::Shape{n, rows.state_floats}, aiacc::DType::f32);
    for (std::int64_t k = 0; k < n; ++k) {
      const std::size_t i = order[static_cast<std::size_t>(k)];
      ids.data<std::int64_t>()[k] = rows.ids[i];
      std::copy(rows.values[i].begin(), rows.values[i].end(), values.data<float>() + k * rows.dim);
      std::copy(rows.state[i].begin(), rows.state[i].end(), state.data<float>() + k * rows.state_floats);
    }
    out.emplace("table/" + table + ".ids", ids);
    out.emplace("table/" + table + ".values", values);
    out.emplace("table/" + table + ".state", state);
  }
  return out;
}

// Every tensor of `a` equals `b`'s within `rel` relative (of the tensor's largest magnitude);
// ids and counters exactly. The optimiser file's tensors within `optimizer_rel` when given.
void expect_same_state(const std::string& a, const std::string& b, double rel, int steps = kSteps,
                       std::optional<double> optimizer_rel = std::nullopt) {
  const auto ta = final_checkpoint(a, steps), tb = final_checkpoint(b, steps);
  ASSERT_FALSE(ta.empty()) << a;
  int compared = 0;
  for (const auto& [name, x] : ta) {
    const double bound = name.rfind("optimizer/", 0) == 0 ? optimizer_rel.value_or(rel) : rel;
    auto it = tb.find(name);
    ASSERT_NE(it, tb.end()) << name << " is in " << a << " but not in " << b;
    const aiacc::Tensor& y = it->second;
    ASSERT_EQ(x.shape(), y.shape()) << name;
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    if (x.dtype() == aiacc::DType::i64) {
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        ASSERT_EQ(x.data<std::int64_t>()[i], y.data<std::int64_t>()[i]) << name << "[" << i << "]";
      }
    } else if (x.dtype() == aiacc::DType::f32) {
      double scale = 1e-6;
      for (std::int64_t i = 0; i < x.numel(); ++i) scale = std::max(scale, std::fabs(double(x.data<float>()[i])));
      double worst = 0;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        worst = std::max(worst, std::fabs(double(x.data<float>()[i]) - y.data<float>()[i]) / scale);
      }
      EXPECT_LE(worst, bound) << name << ": " << a << " vs " << b;
    }
    ++compared;
  }
  EXPECT_GT(compared, 3);
}

const char* kOneWorker = "  workers: 1\n";

TEST(DistributedTrain, TwoRingWorkersEqualOneWorkerWithTwiceTheBatch) {
  auto one = train("mlp_1w", mlp_job("mlp_1w", 64, kOneWorker));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = train("mlp_2w", mlp_job("mlp_2w", 32, "  workers: 2\n"));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("started 2 workers and 0 parameter-server shards"));
  EXPECT_THAT(two.output, HasSubstr("comm wait"));
  expect_same_state("mlp_1w", "mlp_2w", 1e-5);
}

// train.early_stopping on 2 workers: the evaluation merges both workers' scores, so both see the
// same loss, decide alike and stop at the same step (a worker that went on would wait for the
// other in its next all-reduce until the timeout). min_delta 10: the evaluation at step 10 does
// not improve on step 5's, and patience 1 stops there, with a checkpoint.
TEST(DistributedTrain, EarlyStoppingStopsEveryWorkerAtTheSameStep) {
  auto run = train("mlp_2w_stop", mlp_job("mlp_2w_stop", 32, "  workers: 2\n"), "", "",
                   "--set train.eval_every_steps=5 --set train.early_stopping.patience=1 "
                   "--set train.early_stopping.min_delta=10");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("early stopping: test loss"));
  EXPECT_THAT(run.output, HasSubstr("stopping after step 10 of 20"));
  EXPECT_THAT(run.output, HasSubstr("stopped: 10 steps"));
  EXPECT_TRUE(fs::exists(scratch() / "mlp_2w_stop" / "checkpoints" / "step-000000000010"));
}

// A worker slowed by 5 ms a step (AIACC_TEST_SLOW_WORKER: a slower core or host as the others
// see it) is named at the end as the slowest, in a warning, with its compute per step: the
// summary record's compute_ms_per_step puts it about 5 ms above the other's, whose waits for
// it count as communication, not compute. Sync training made every worker as slow as it
// without a word on which one held the others back.
TEST(DistributedTrain, TheSlowestWorkerIsNamedWithItsComputePerStep) {
  constexpr double kSlowMs = 5.0;
  auto r = train("pace_2w", mlp_job("pace_2w", 32, "  workers: 2\n"), "AIACC_TEST_SLOW_WORKER=1:5000");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("W .*compute per step \\(training time less communication wait\\): "
                                                 "worker 1 [0-9.]+ ms, the slowest, [0-9]+% above worker 0's"));
  std::ifstream metrics(scratch() / "pace_2w" / "metrics.jsonl");
  int summaries = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") != "summary") continue;
    ++summaries;
    const auto ms = record.at("compute_ms_per_step").get<std::vector<double>>();
    ASSERT_EQ(ms.size(), 2u);
    // A sleep lasts at least its time, and on a loaded machine longer (5.1-5.3 ms here). Had
    // worker 0's waits for it counted as compute, the two would be about equal.
    EXPECT_GT(ms[1] - ms[0], kSlowMs * 0.9) << line;
    EXPECT_LT(ms[1] - ms[0], kSlowMs * 3) << line;
  }
  EXPECT_EQ(summaries, 1);
}

// train.clip_grad_norm clips the gradients the workers averaged, by their global norm: two
// workers then equal one worker with twice the batch, clipped steps included. Clipping each
// worker's own gradients before the average would not.
TEST(DistributedTrain, TwoWorkersClipTheAveragedGradientsAsOneWorkerWithTwiceTheBatch) {
  const auto clipped = [](std::string job) {
    const std::string at = "eval_each_epoch: false,";
    job.replace(job.find(at), at.size(), at + " clip_grad_norm: 0.2,");
    return job;
  };
  auto one = train("clip_1w", clipped(mlp_job("clip_1w", 64, kOneWorker)));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = train("clip_2w", clipped(mlp_job("clip_2w", 32, "  workers: 2\n")));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(one.output, ::testing::ContainsRegex("grad norm [0-9.]+ \\(clipped [1-9][0-9]*/10\\)"));
  EXPECT_THAT(two.output, ::testing::ContainsRegex("grad norm [0-9.]+ \\(clipped [1-9][0-9]*/10\\)"));
  expect_same_state("clip_1w", "clip_2w", 1e-5);
}

// The share of step time spent waiting on communication stays within step time when every
// other step saves a checkpoint: the workers other than the leader used to wait for its save in
// their next collective and count it as communication (1.03-1.47 in every interval of this job).
TEST(DistributedTrain, CheckpointsAreNotCountedAsCommunication) {
  const std::string cluster = "  workers: 2\n  servers: 1\n  placement: [{match: 'wide.*', place: ps}]\n";
  auto r = train("wd_comm_share", wide_deep_job("wd_comm_share", 32, cluster), "", "",
                 "--set train.log_every_steps=2 --set train.checkpoint.every_steps=2");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream metrics(scratch() / "wd_comm_share" / "metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") != "train" && record.value("kind", "") != "summary") continue;
    EXPECT_LE(record.at("comm_wait_share").get<double>(), 1.0) << line;
    ++records;
  }
  EXPECT_EQ(records, kSteps / 2 + 1);
}

// cluster.launcher: local starts the job's processes whatever an outer launcher's variables say
// (here torchrun-style ones that would fail the config check if honoured), and each process it
// starts joins as its rank rather than launching a job of its own: the job ends where the
// same job under launcher auto ends, bit for bit.
TEST(DistributedTrain, LauncherLocalStartsItsRanksWhateverOuterVariablesSay) {
  auto reference = train("mlp_auto_launcher", mlp_job("mlp_auto_launcher", 32, "  workers: 2\n"));
  ASSERT_EQ(reference.status, 0) << reference.output;
  auto local = train("mlp_local_launcher", mlp_job("mlp_local_launcher", 32, "  workers: 2\n  launcher: local\n"),
                     "RANK=5 WORLD_SIZE=9 LOCAL_RANK=5");
  ASSERT_EQ(local.status, 0) << local.output;
  const std::string started = "started 2 workers and 0 parameter-server shards";
  const auto first = local.output.find(started);
  ASSERT_NE(first, std::string::npos) << local.output;
  EXPECT_EQ(local.output.find(started, first + 1), std::string::npos) << "more than one launcher:\n" << local.output;
  expect_same_state("mlp_auto_launcher", "mlp_local_launcher", 0.0);
}

// An outer launcher's variables that cannot describe this process stop it at once with a
// config error naming the variable, before it waits for any peer.
TEST(DistributedTrain, BadLauncherVariablesAreConfigErrorsNamingThem) {
  const std::string yaml = mlp_job("bad_env", 32, "  workers: 2\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"RANK=x WORLD_SIZE=2", "RANK='x' is not a rank or count"},
      {"RANK=2 WORLD_SIZE=2", "RANK=2 is outside the world of 2"},
      {"RANK=0", "RANK is set (0) but WORLD_SIZE is not"},
      // Without a rank every process would start a whole local job of its own.
      {"WORLD_SIZE=2", "WORLD_SIZE is set (2) but RANK is not"},
      {"RANK=0 WORLD_SIZE=3", "says the job has 3 processes"},
      {"RANK=0 WORLD_SIZE=2 MASTER_PORT=0", "MASTER_PORT='0' is not a TCP port"},
      {"RANK=0 WORLD_SIZE=2 MASTER_PORT=70000", "MASTER_PORT='70000' is not a TCP port"},
      {"RANK=0 WORLD_SIZE=2 MASTER_PORT=http", "MASTER_PORT='http' is not a TCP port"},
      {"RANK=0 WORLD_SIZE=2 MASTER_PORT=' 29500'", "MASTER_PORT=' 29500' is not a TCP port"},
      // Glued to the port, these reached no store: every rank waited the start timeout.
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1:29500", "MASTER_ADDR='127.0.0.1:29500' has a port"},
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=::1", "MASTER_ADDR='::1' is an IPv6 address"},
      {"OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=5 is outside the world of 2"},
      {"SLURM_PROCID=3 SLURM_NTASKS=2", "SLURM_PROCID=3 is outside the world of 2"},
      // torchrun under srun (one task per node): torchrun's variables are this process's.
      {"SLURM_PROCID=0 SLURM_NTASKS=1 RANK=5 WORLD_SIZE=2", "RANK=5 is outside the world of 2"},
  };
  for (const auto& [env, message] : cases) {
    const auto r = train("bad_env", yaml, std::string(kTokenEnv) + " " + env);
    EXPECT_EQ(r.status, 2) << env << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << env;
  }
}

// job.threads 0: a rank takes OMP_NUM_THREADS when it is set (it used to be overridden by the
// machine's cores shared among the ranks), and one thread when the launcher pins it to a core.
TEST(DistributedTrain, ComputeThreadsFollowOmpNumThreadsAndPinning) {
  const std::string yaml = mlp_job("threads", 32, "  workers: 2\n");
  auto from_env = train("threads", yaml, "OMP_NUM_THREADS=3", "", "--set train.max_steps=1");
  ASSERT_EQ(from_env.status, 0) << from_env.output;
  EXPECT_THAT(from_env.output, HasSubstr("[worker 1] [trainer] 3 compute threads (job.threads 0)"));
  auto pinned = train("threads", yaml, "", "",
                      "--set train.max_steps=1 --set cluster.pin_cores=true --set job.name=threads_pinned");
  ASSERT_EQ(pinned.status, 0) << pinned.output;
  EXPECT_THAT(pinned.output, HasSubstr("[worker 1] [trainer] 1 compute thread (job.threads 0)"));
}

// job.threads 0, data.prefetch_batches -1 and cluster.ps.threads 0 (a shard's) in a container
// limited to one CPU's time (a real cgroup v1 cpu quota, as root): every core stays allowed, yet
// one process runs one compute thread and reads its batches on the training thread, alone or
// as one of two ranks, and a parameter-server shard answers each request with one thread.
TEST(DistributedTrain, ComputeThreadsAndReadAheadFitACgroupCpuLimit) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: a one-CPU limit cuts nothing";
  aiacc::testing::CpuQuotaGroup group("aiacc-train-test", 100000);
  if (!group.why_not().empty()) GTEST_SKIP() << group.why_not();
  // What the launcher's environment may say about threads is not this test's.
  const std::string env = "env -u OMP_NUM_THREADS -u LOCAL_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_SIZE "
                          "-u SLURM_NTASKS_PER_NODE -u AIACC_LOCAL_WORLD_SIZE";
  // The program (then "$0") moves itself into the group before it starts.
  const std::string in_group =
      fmt::format("{} sh -c 'echo $$ > {} && exec \"$0\" \"$@\"'", env, group.procs().string());
  const std::string steps = "--set train.max_steps=1 --set data.prefetch_batches=-1";
  const auto alone = train("cgroup_limit", mlp_job("cgroup_limit", 32, "  workers: 1\n"), "", in_group, steps);
  const auto ranks = train("cgroup_limit2", mlp_job("cgroup_limit2", 32, "  workers: 2\n"), "", in_group, steps);
  // A parameter-server shard's requests: one thread under the limit too.
  const std::string with_server = "  workers: 1\n  servers: 1\n  placement: [{match: '*', place: ps}]\n";
  const std::string shard_threads = steps + " --set cluster.ps.threads=0";
  const auto served = train("cgroup_ps", wide_deep_job("cgroup_ps", 32, with_server), "", in_group, shard_threads);
  // Unconfined, one process here runs a thread per allowed CPU.
  const auto free = train("cgroup_free", mlp_job("cgroup_free", 32, "  workers: 1\n"), "", env, steps);
  const auto free_served =
      train("cgroup_ps_free", wide_deep_job("cgroup_ps_free", 32, with_server), "", env, shard_threads);
  ASSERT_EQ(alone.status, 0) << alone.output;
  EXPECT_THAT(alone.output, HasSubstr("1 compute thread (job.threads 0): this host's"));
  EXPECT_THAT(alone.output, HasSubstr("cut to 1 by its cgroup's CPU limit of 1 CPU"));
  EXPECT_THAT(alone.output, HasSubstr("batches read on the training thread (this worker can keep one CPU busy only)"));
  ASSERT_EQ(ranks.status, 0) << ranks.output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(ranks.output, HasSubstr(fmt::format("[worker {}] [trainer] 1 compute thread (job.threads 0): this "
                                                    "host's", rank)));
    EXPECT_THAT(ranks.output, HasSubstr(fmt::format("[worker {}] [trainer] data.prefetch_batches -1: batches read on "
                                                    "the training thread", rank)));
  }
  ASSERT_EQ(served.status, 0) << served.output;
  EXPECT_THAT(served.output, HasSubstr("[server 0] [ps] ps shard 0 of 1"));
  EXPECT_THAT(served.output, HasSubstr(", 1 thread a request)"));
  ASSERT_EQ(free.status, 0) << free.output;
  ASSERT_EQ(free_served.status, 0) << free_served.output;
  const std::size_t allowed = aiacc::util::allowed_cpus().size();
  if (allowed > 1 && !aiacc::util::cgroup_cpu_limit()) {
    EXPECT_THAT(free.output, HasSubstr(fmt::format("{} compute threads (job.threads 0): this host's", allowed)));
    EXPECT_THAT(free.output, HasSubstr("batches read ahead by a background thread"));
    EXPECT_THAT(free_served.output, HasSubstr(fmt::format(", {} threads a request)", allowed)));
  }
}

// A job resumed with another worker count or batch size continues at the same place of the
// epoch's order: 10 steps of 2 workers x 32 examples are 20 steps of 1 x 32; a global batch
// that does not divide the 640 examples read is refused naming both keys (evaluating the
// checkpoint is not), and so is a larger one.
TEST(DistributedTrain, AResumeWithAnotherGlobalBatchContinuesAtTheSameExample) {
  auto yaml = [](int batch, const std::string& cluster) { return wide_deep_job("regrouped", batch, cluster); };
  auto first = train("regrouped", yaml(32, "  workers: 2\n"), "", "", "--set train.max_steps=10");
  ASSERT_EQ(first.status, 0) << first.output;
  // Evaluating the checkpoint does not use its data position: any batch size will do.
  const fs::path step10 = scratch() / "regrouped" / "checkpoints" / "step-000000000010";
  auto eval = train("regrouped", yaml(48, kOneWorker), "", "", "--eval " + step10.string());
  EXPECT_EQ(eval.status, 0) << eval.output;
  auto bad = train("regrouped", yaml(48, kOneWorker), "", "", "--set train.max_steps=20");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("640 examples into epoch 1"));
  EXPECT_THAT(bad.output, HasSubstr("cluster.workers 1 x data.batch_size 48"));
  // The step follows: batch 20 of one worker is its step 20, and max_steps counts from there.
  auto resumed = train("regrouped", yaml(32, kOneWorker), "", "", "--set train.max_steps=24");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("(step 20, epoch 1, batch 20)"));
  EXPECT_THAT(resumed.output, HasSubstr("done: 4 steps"));
  // A larger global batch would number its checkpoints below step 24's: refused.
  auto larger = train("regrouped", yaml(32, "  workers: 2\n"), "", "", "--set train.max_steps=30");
  EXPECT_EQ(larger.status, 2) << larger.output;
  EXPECT_THAT(larger.output, HasSubstr("step 24 of the checkpoint's job is step 12 of this one"));
}

// Without drop_last the workers' shards can differ by a batch, and a worker's extra step would
// wait for peers that never join it: refused at start naming the key.
TEST(DistributedTrain, KeepingTheLastBatchWithSeveralWorkersIsAConfigError) {
  const auto r = train("keep_last", mlp_job("keep_last", 30, "  workers: 2\n"), "", "", "--set data.drop_last=false");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data.drop_last: false with 2 workers"));
  const auto one = train("keep_last_1w", mlp_job("keep_last_1w", 30, kOneWorker), "", "", "--set data.drop_last=false");
  EXPECT_EQ(one.status, 0) << one.output;
}

// cluster.ring.auto_tune tries the configured bucket size too (it tried 1, 4 and 16 MiB only, and
// all three for a model one bucket holds), says what it tries, warns when the job ends first,
// and changes no result: sums of two workers do not depend on the bucket plan. Its step count
// is the tuner's: a single setting (one bucket, one stream) is chosen at once, where the
// trainer's own count said 4 steps and warned that a 3-step job did not finish tuning.
TEST(DistributedTrain, AutoTuningTriesTheConfiguredBucketAndSaysWhenItCannotFinish) {
  const auto single = train("tune_single", mlp_job("tune_single", 16, "  workers: 2\n  ring: {auto_tune: true}\n"), "",
                            "", "--set train.max_steps=3");
  ASSERT_EQ(single.status, 0) << single.output;
  EXPECT_THAT(single.output, HasSubstr("auto-tuning: bucket 1024 KiB, 1 stream is the only setting for this model "
                                       "and cluster.ring.comm.streams: nothing to tune"));
  EXPECT_THAT(single.output, Not(HasSubstr("did not finish")));

  const std::string cluster = "  workers: 2\n  ring: {bucket_bytes: 2048, auto_tune: true}\n";
  const auto brief = train("tune_brief", mlp_job("tune_brief", 16, cluster), "", "", "--set train.max_steps=3");
  ASSERT_EQ(brief.status, 0) << brief.output;
  EXPECT_THAT(brief.output, HasSubstr("auto-tuning tries buckets of 2, 1024 KiB x 1 stream count(s) over the first 8 steps"));
  EXPECT_THAT(brief.output, HasSubstr("auto-tuning did not finish: this run had 3 steps of the 8"));

  const auto tuned = train("tune_whole", mlp_job("tune_whole", 16, cluster));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_THAT(tuned.output, HasSubstr("auto-tuning chose bucket"));
  EXPECT_THAT(tuned.output, Not(HasSubstr("did not finish")));
  const auto plain = train("tune_plain", mlp_job("tune_plain", 16, "  workers: 2\n"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  expect_same_state("tune_plain", "tune_whole", 0.0);
}

// One worker beside a parameter-server shard, every table on the ring (its own store): nothing
// is communicated during the steps, so the progress lines, their records and the summary all
// say 0. The progress counted the local tables' row updates as communication.
TEST(DistributedTrain, OneWorkerWithItsTablesLocalWaitsOnNoCommunication) {
  const std::string cluster = "  workers: 1\n  servers: 1\n  placement: [{match: '*', place: ring}]\n";
  const auto r = train("wait_1w", wide_deep_job("wait_1w", 32, cluster), "", "", "--set train.log_every_steps=5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("comm wait 0%"));
  EXPECT_THAT(r.output, HasSubstr("samples/s, 0% of step time waiting on communication"));
  int progress = 0, summaries = 0;
  std::ifstream metrics(scratch() / "wait_1w" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    const std::string kind = record.value("kind", "");
    if (kind != "train" && kind != "summary") continue;
    (kind == "train" ? progress : summaries) += 1;
    EXPECT_EQ(record.at("comm_wait_share").get<double>(), 0.0) << line;
  }
  EXPECT_EQ(progress, kSteps / 5);
  EXPECT_EQ(summaries, 1);
}

// A launcher killed outright (SIGKILL: no cleanup of its own) takes its processes with it: the
// kernel sends them SIGTERM instead of leaving them to train on unsupervised.
TEST(DistributedTrain, KillingTheLauncherOutrightEndsItsProcesses) {
  const fs::path config = scratch() / "orphans.yaml";
  std::ofstream(config) << mlp_job("orphans", 32, "  workers: 2\n");
  const fs::path log = scratch() / "orphans.log";
  // Training for hours unless stopped; once it logs progress the launcher gets SIGKILL, then
  // the processes still running this config are counted for up to 10 s (and killed after).
  const fs::path script = scratch() / "orphans.sh";
  std::ofstream(script) << fmt::format(
      "{0} {1} --set train.max_steps=100000000 --set train.epochs=100000 --set train.log_every_steps=5 > {2} 2>&1 &\n"
      "launcher=$!\n"
      "for i in $(seq 600); do grep -q 'samples/s' {2} && break; sleep 0.1; done\n"
      "echo \"before: $(pgrep -c -f -- '{1}')\"\n"
      "kill -9 $launcher\n"
      "for i in $(seq 100); do n=$(pgrep -c -f -- '{1}'); [ \"$n\" = 0 ] && break; sleep 0.1; done\n"
      "echo \"left: $n\"\n"
      "pkill -9 -f -- '{1}'\n"
      "true\n",
      g_program, config.string(), log.string());
  const auto r = aiacc::testing::run_command("bash " + script.string());
  ASSERT_THAT(r.output, HasSubstr("before: 3")) << "the launcher and its 2 workers were not all running:\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("left: 0")) << r.output;
}

// ResNet-20 with batch norm: synchronised statistics make the split exact. Training it from
// scratch is chaotic in fp32 (measured, one worker, lr 0.002, momentum 0.9: a one-ulp change
// of the learning rate moves the parameters by 1.4e-5 after 5 steps and 1.1e-3 after 20, and
// the 1-worker vs 2-worker difference, which starts as the order of fp32 sums, grows the same
// way), so a 20-step comparison from initialisation would measure the model's chaos, not the
// framework. Past the first steps it calms down: from a checkpoint after kResNetWarmSteps steps
// (lr 0.05) the same ulp change moves the parameters by under 2e-7 in 20 steps at lr 0.005. So
// one worker trains kResNetWarmSteps steps at lr 0.05, and the comparison runs 20 more at lr
// 0.005 from that checkpoint, once on one worker with batch 16 and once on two with batch 8
// (resuming a 1-worker checkpoint on two workers is itself part of what is tested).
constexpr int kResNetWarmSteps = 150;
std::string resnet_job(const std::string& name, int batch, int steps, double lr, const std::string& cluster) {
  return fmt::format(R"(job: {{name: {}, run_dir: {}, seed: 7}}
model: {{type: resnet, resnet: {{depth: 20}}}}
data:
  batch_size: {}
  train: {{type: synthetic_images, synthetic_images: {{size: 8192, channels: 1, height: 28, width: 28}}}}
  test: {{type: synthetic_images, synthetic_images: {{size: 64, channels: 1, height: 28, width: 28}}}}
optimizer: {{type: sgd, lr: {}, momentum: 0.9}}
train: {{epochs: 1, max_steps: {}, log_every_steps: 50, eval_each_epoch: false,
        checkpoint: {{at_end: true, resume: auto}}}}
cluster:
{}
)",
                     name, scratch().string(), batch, lr, steps, cluster);
}

TEST(DistributedTrain, ResNetOnTwoWorkersWithSyncBatchNormEqualsOneWorkerWithTwiceTheBatch) {
  fs::remove_all(scratch() / "resnet_warm");  // a repeated test starts from scratch too
  auto warm = train("resnet_warm", resnet_job("resnet_warm", 16, kResNetWarmSteps, 0.05, kOneWorker));
  ASSERT_EQ(warm.status, 0) << warm.output;
  for (const char* name : {"resnet_1w", "resnet_2w", "resnet_2w_local"}) {
    fs::remove_all(scratch() / name);
    fs::copy(scratch() / "resnet_warm", scratch() / name, fs::copy_options::recursive);
  }
  const std::string resumed = fmt::format("(step {}", kResNetWarmSteps);
  const int end = kResNetWarmSteps + kSteps;
  auto one = train("resnet_1w", resnet_job("resnet_1w", 16, end, 0.005, kOneWorker));
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_THAT(one.output, HasSubstr(resumed));
  auto two = train("resnet_2w", resnet_job("resnet_2w", 8, end, 0.005, "  workers: 2\n  sync_batch_norm: true\n"));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr(resumed));
  // The momentum buffers are running sums of gradients whose near-cancelling entries keep the
  // rounding of the split batch (measured up to 2e-4 relative at other warm-up lengths); the
  // parameters they move stay within 1e-5.
  expect_same_state("resnet_1w", "resnet_2w", 1e-5, end, 1e-3);
  // Without synchronised statistics the two differ (the comparison can fail).
  auto local_bn = train("resnet_2w_local", resnet_job("resnet_2w_local", 8, end, 0.005, "  workers: 2\n"));
  ASSERT_EQ(local_bn.status, 0) << local_bn.output;
  EXPECT_THAT(local_bn.output, HasSubstr(resumed));
  const auto a = final_checkpoint("resnet_1w", end), b = final_checkpoint("resnet_2w_local", end);
  const auto& x = a.at("model/layer3.0.bn2.bias");
  const auto& y = b.at("model/layer3.0.bn2.bias");
  double diff = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) diff = std::max(diff, double(std::fabs(x.data<float>()[i] - y.data<float>()[i])));
  EXPECT_GT(diff, 1e-4);
}

TEST(DistributedTrain, WideDeepOnTwoShardsEqualsOneWorkerWithTwiceTheBatch) {
  auto one = train("wd_1w", wide_deep_job("wd_1w", 64, kOneWorker, "sgd"));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = train("wd_ps", wide_deep_job("wd_ps", 32,
                                         "  workers: 2\n  servers: 2\n  placement: [{match: '*', place: ps}]\n", "sgd"));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("started 2 workers and 2 parameter-server shards"));
  EXPECT_THAT(two.output, HasSubstr("deep.C7"));
  EXPECT_THAT(two.output, HasSubstr("placement rule"));
  expect_same_state("wd_1w", "wd_ps", 1e-5);
}

// train.gradient_accumulation_steps: 2 workers x 2 micro-batches of 16 equal 1 worker with a
// batch of 64. Rows of the tables on the server (wide.*) and of the replicated ones (deep.*) are
// summed over a worker's micro-batches and pushed or exchanged once a step; the dense gradients
// are all-reduced during the last micro-batch's backward.
TEST(DistributedTrain, TwoWorkersAccumulatingTwoMicroBatchesEqualOneWorkerWithFourTimesTheBatch) {
  auto one = train("wd_acc_1w", wide_deep_job("wd_acc_1w", 64, kOneWorker, "sgd"));
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = train("wd_acc_2w",
                   wide_deep_job("wd_acc_2w", 16,
                                 "  workers: 2\n  servers: 1\n"
                                 "  placement: [{match: 'wide.*', place: ps}, {match: 'deep.*', place: ring}]\n",
                                 "sgd"),
                   "", "", "--set train.gradient_accumulation_steps=2");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("each step averages 2 micro-batches of 16 per worker: a global batch of 64"));
  expect_same_state("wd_acc_1w", "wd_acc_2w", 1e-5);
  // One worker on an async server with a hot-row cache (no staleness: the same rows as a local
  // table), the next micro-batch's rows prefetched through the cache while one computes: rows a
  // micro-batch fetched serve the step's later ones (27% of pulled rows, measured).
  auto cached = train("wd_acc_cache",
                      wide_deep_job("wd_acc_cache", 16,
                                    "  workers: 1\n  servers: 1\n  placement: [{match: '*', place: ps}]\n"
                                    "  ps: {consistency: async, cache_rows: 4096, cache_staleness: 0}\n",
                                    "sgd"),
                      "", "", "--set train.gradient_accumulation_steps=4");
  ASSERT_EQ(cached.status, 0) << cached.output;
  expect_same_state("wd_acc_1w", "wd_acc_cache", 1e-5);
}

TEST(DistributedTrain, ForcedAutoAndMixedPlacementsTrainAlike) {
  auto ring = train("wd_ring", wide_deep_job("wd_ring", 32, "  workers: 2\n  servers: 0\n"));
  ASSERT_EQ(ring.status, 0) << ring.output;
  EXPECT_THAT(ring.output, HasSubstr("auto: no parameter servers"));
  auto mixed = train("wd_mixed", wide_deep_job("wd_mixed", 32,
                                              "  workers: 2\n  servers: 1\n"
                                              "  placement: [{match: 'deep.*', place: ps}, {match: 'wide.*', place: ring}]\n"),
                     "", "", "--set train.trace=true");
  ASSERT_EQ(mixed.status, 0) << mixed.output;
  // The job's trace: both workers' compute, bucket all-reduces and parameter-server requests.
  {
    std::ifstream in(scratch() / "wd_mixed" / "trace.json");
    const auto trace = nlohmann::json::parse(in);
    std::set<std::pair<int, std::string>> seen;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.contains("cat")) seen.emplace(e.at("pid").get<int>(), e.at("cat").get<std::string>());
    }
    for (int pid : {0, 1}) {
      for (const char* cat : {"compute", "allreduce", "ps", "wait"}) {
        EXPECT_TRUE(seen.count({pid, cat})) << "no '" << cat << "' events of worker " << pid;
      }
    }
  }
  auto automatic = train("wd_auto", wide_deep_job("wd_auto", 32, "  workers: 2\n  servers: 2\n"));
  ASSERT_EQ(automatic.status, 0) << automatic.output;
  EXPECT_THAT(automatic.output, HasSubstr("auto: per step"));
  auto ps = train("wd_ps_only", wide_deep_job("wd_ps_only", 32,
                                             "  workers: 2\n  servers: 2\n  placement: [{match: '*', place: ps}]\n"));
  ASSERT_EQ(ps.status, 0) << ps.output;
  expect_same_state("wd_ring", "wd_mixed", 1e-5);
  expect_same_state("wd_ring", "wd_auto", 1e-5);
  expect_same_state("wd_ring", "wd_ps_only", 1e-5);
}

// A resume under another placement, the shard count unchanged: wide.C1 moves from the ring to
// the shards and deep.C1 from the shards to the ring at step 10, and both move back at step 20.
// Each table's rows come from where the checkpoint holds them (wide.C1 used to start afresh
// on the shards, and deep.C1 to come back as the rows its shard file still held from step
// 10), so the job ends where one that never moved does. Other table settings (the worker
// count, the learning rate) load the shards' files too (they used to be refused: "differs from
// the one registered").
TEST(DistributedTrain, AResumeUnderAnotherPlacementKeepsEveryTablesRows) {
  const std::string deep_on_ps = "  workers: 2\n  servers: 2\n  placement: [{match: 'deep.*', place: ps}]\n";
  const std::string moved =
      "  workers: 2\n  servers: 2\n  placement: [{match: 'wide.C1', place: ps}, {match: 'deep.C1', place: ring}, "
      "{match: 'deep.*', place: ps}]\n";
  auto whole = train("wd_place_whole", wide_deep_job("wd_place_whole", 32, deep_on_ps), "", "", "--set train.max_steps=30");
  ASSERT_EQ(whole.status, 0) << whole.output;
  for (const auto& [cluster, steps] : {std::pair{deep_on_ps, 10}, std::pair{moved, 20}, std::pair{deep_on_ps, 30}}) {
    auto leg = train("wd_place_moved", wide_deep_job("wd_place_moved", 32, cluster), "", "",
                     fmt::format("--set train.max_steps={}", steps));
    ASSERT_EQ(leg.status, 0) << leg.output;
  }
  expect_same_state("wd_place_whole", "wd_place_moved", 1e-5, 30);
  const std::string checkpoint = (scratch() / "wd_place_whole" / "checkpoints" / fmt::format("step-{:012d}", 30)).string();
  auto eval = train("wd_place_whole", wide_deep_job("wd_place_whole", 32, deep_on_ps), "", "",
                    "--eval " + checkpoint + " --set cluster.workers=1 --set data.batch_size=64");
  EXPECT_EQ(eval.status, 0) << eval.output;
  auto resumed = train("wd_place_whole", wide_deep_job("wd_place_whole", 32, deep_on_ps), "", "",
                       "--set train.max_steps=40 --set sparse_optimizer.lr=0.02");
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("sparse_optimizer.lr: 0.05 -> 0.02"));
}

// With a worker hot-row cache, the test metrics a job logs at the end of training are those of
// the rows the shards hold (those its checkpoint saves), not of cached rows up to
// cache_staleness steps old: --eval of the checkpoint gives the same figures.
TEST(DistributedTrain, TestMetricsWithARowCacheAreThoseOfTheCheckpoint) {
  const std::string cluster =
      "  workers: 2\n  servers: 1\n  placement: [{match: 'deep.*', place: ps}]\n"
      "  ps: {consistency: async, cache_rows: 4096, cache_staleness: 4}\n";
  const std::string job = wide_deep_job("wd_cache_eval", 32, cluster);
  auto trained = train("wd_cache_eval", job, "", "", "--set train.eval_each_epoch=true");
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string checkpoint = (scratch() / "wd_cache_eval" / "checkpoints" / fmt::format("step-{:012d}", kSteps)).string();
  auto evaluated = train("wd_cache_eval", job, "", "", "--eval " + checkpoint);
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  std::vector<nlohmann::json> evals;
  std::ifstream metrics(scratch() / "wd_cache_eval" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("kind", "").starts_with("eval")) evals.push_back(record);
  }
  ASSERT_EQ(evals.size(), 2u) << "an eval at the end of training and one of the checkpoint";
  for (const char* metric : {"loss", "auc", "accuracy"}) {
    EXPECT_NEAR(evals[0].at(metric).get<double>(), evals[1].at(metric).get<double>(), 1e-9) << metric;
  }
}

// An evaluation reads the shards' rows without creating rows for ids only the test split holds
// and without counting its reads towards admission: a job that evaluates after every epoch
// trains exactly like one that does not (its reads used to create rows and admit ids early).
TEST(DistributedTrain, EvaluatingBetweenEpochsAndEveryNStepsLeavesTheTrainingAsItWas) {
  const std::string cluster =
      "  workers: 1\n  servers: 1\n  placement: [{match: 'deep.*', place: ps}]\n  ps: {min_count: 2}\n";
  const std::string sets = " --set train.max_steps=0 --set train.epochs=2 --set data.train.synthetic_ctr.size=640";
  auto quiet = train("wd_no_eval", wide_deep_job("wd_no_eval", 32, cluster), "", "", sets);
  ASSERT_EQ(quiet.status, 0) << quiet.output;
  // Every 10 steps too (train.eval_every_steps): within the epochs, with the next batch's rows
  // being prefetched from the server, and at their ends, where the epoch's own evaluation runs
  // once.
  auto evaluating = train("wd_eval", wide_deep_job("wd_eval", 32, cluster), "", "",
                          sets + " --set train.eval_each_epoch=true --set train.eval_every_steps=10");
  ASSERT_EQ(evaluating.status, 0) << evaluating.output;
  EXPECT_THAT(evaluating.output, HasSubstr("epoch 1/2 test loss"));
  EXPECT_THAT(evaluating.output, HasSubstr("step 10/40 test loss"));
  expect_same_state("wd_no_eval", "wd_eval", 0.0, 40);
  std::vector<std::string> evals;
  std::ifstream metrics(scratch() / "wd_eval" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") != "eval") continue;
    evals.push_back(fmt::format("{}{}", record.at("step").get<int>(), record.value("within_epoch", false) ? "w" : "e"));
    EXPECT_EQ(record.at("examples").get<int>(), 500);
  }
  EXPECT_EQ(evals, (std::vector<std::string>{"10w", "20e", "30w", "40e"}));
}

TEST(DistributedTrain, KilledWorkerStopsTheJobAndResumeMatchesAnUninterruptedRun) {
  const std::string cluster = "  workers: 2\n  servers: 1\n  placement: [{match: 'wide.*', place: ps}]\n";
  auto whole = train("wd_whole", wide_deep_job("wd_whole", 32, cluster));
  ASSERT_EQ(whole.status, 0) << whole.output;

  auto crashed = train("wd_resumed", wide_deep_job("wd_resumed", 32, cluster), "AIACC_TEST_KILL_AT=1:13");
  EXPECT_NE(crashed.status, 0) << crashed.output;
  EXPECT_THAT(crashed.output, HasSubstr("worker 1 (pid"));
  EXPECT_THAT(crashed.output, HasSubstr("killed by signal 9"));
  EXPECT_THAT(crashed.output, HasSubstr("job failed"));

  auto resumed = train("wd_resumed", wide_deep_job("wd_resumed", 32, cluster));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from"));
  EXPECT_THAT(resumed.output, HasSubstr("step 10"));
  // The momentum buffers and row state continue exactly, so everything matches.
  expect_same_state("wd_whole", "wd_resumed", 1e-6);

  // --eval: the final checkpoint evaluated by the 2-worker job (rows reloaded into a fresh
  // shard, test split sharded over the workers, scores merged) and by one process agree.
  const std::string checkpoint =
      (scratch() / "wd_whole" / "checkpoints" / fmt::format("step-{:012d}", kSteps)).string();
  auto distributed = train("wd_whole", wide_deep_job("wd_whole", 32, cluster), "", "", "--eval " + checkpoint);
  ASSERT_EQ(distributed.status, 0) << distributed.output;
  auto single = train("wd_whole", wide_deep_job("wd_whole", 32, cluster), "", "",
                      "--eval " + checkpoint + " --set cluster.workers=1 --set cluster.servers=0");
  ASSERT_EQ(single.status, 0) << single.output;
  std::vector<nlohmann::json> evals;
  std::ifstream metrics(scratch() / "wd_whole" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") == "eval_checkpoint") evals.push_back(record);
  }
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].at("examples"), 500);
  EXPECT_EQ(evals[1].at("examples"), 500);
  EXPECT_NEAR(evals[0].at("auc").get<double>(), evals[1].at("auc").get<double>(), 1e-12);
  EXPECT_NEAR(evals[0].at("log_loss").get<double>(), evals[1].at("log_loss").get<double>(), 1e-9);
  EXPECT_GT(evals[0].at("auc").get<double>(), 0.5);
}

// train.checkpoint.on_signal: a SIGTERM that reaches worker 1 alone after step 12 stops both
// workers together at their next check (step 15, with signal_check_steps 5), after a checkpoint
// there; the job exits with 128 + 15 and says it stopped; resumed, it ends exactly where a job
// that never stopped does. A SIGTERM to the local launcher stops the job the same way (it used
// to end every process at once, losing the steps since the last checkpoint).
TEST(DistributedTrain, AStopSignalCheckpointsAtAStepTheWorkersAgreeOn) {
  const std::string cluster = "  workers: 2\n  servers: 1\n  placement: [{match: 'wide.*', place: ps}]\n";
  auto whole = train("wd_signal_whole", wide_deep_job("wd_signal_whole", 32, cluster));
  ASSERT_EQ(whole.status, 0) << whole.output;

  const std::string checks = "--set train.checkpoint.signal_check_steps=5";
  auto stopped = train("wd_signal", wide_deep_job("wd_signal", 32, cluster), "AIACC_TEST_KILL_AT=1:12:term", "", checks);
  EXPECT_EQ(stopped.status, 128 + SIGTERM) << stopped.output;
  EXPECT_THAT(stopped.output, HasSubstr("stopped by signal 15 (Terminated) on 1 of 2 workers after step 15"));
  EXPECT_THAT(stopped.output, HasSubstr("job stopped: on a stop signal, with a checkpoint (worker"));
  EXPECT_THAT(stopped.output, Not(HasSubstr("killed by signal")));
  EXPECT_TRUE(fs::exists(scratch() / "wd_signal" / "checkpoints" / "step-000000000015"));
  EXPECT_FALSE(fs::exists(scratch() / "wd_signal" / "checkpoints" / fmt::format("step-{:012d}", kSteps)));
  auto resumed = train("wd_signal", wide_deep_job("wd_signal", 32, cluster), "", "", checks);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from"));
  EXPECT_THAT(resumed.output, HasSubstr("step 15"));
  expect_same_state("wd_signal_whole", "wd_signal", 1e-6);

  // The shard alone gets it (its pod evicted): the workers hear of it through the store (the
  // shard looks at its flag every 0.5 s: a job of 6250 steps leaves it the time).
  auto shard = train("wd_signal_shard", wide_deep_job("wd_signal_shard", 32, cluster), "AIACC_TEST_KILL_AT=2:12:term",
                     "", checks + " --set train.epochs=50 --set train.max_steps=0");
  EXPECT_EQ(shard.status, 128 + SIGTERM) << shard.output;
  EXPECT_THAT(shard.output, HasSubstr("stopped by signal 15 (Terminated) on 0 of 2 workers and a parameter-server "
                                      "shard after step"));
  EXPECT_THAT(shard.output, HasSubstr("job stopped: on a stop signal, with a checkpoint (worker"));

  // The launcher gets the signal (a user's kill, a scheduler's stop) once the job is under way.
  const fs::path config = scratch() / "wd_signal_launcher.yaml";
  std::ofstream(config) << wide_deep_job("wd_signal_launcher", 32, cluster);
  const fs::path log = scratch() / "wd_signal_launcher.log";
  const auto r = aiacc::testing::run_command(fmt::format(
      "{} {} {} --set train.epochs=50 --set train.max_steps=0 > {} 2>&1 & pid=$!; "
      "for i in $(seq 1200); do grep -q 'step 20/' {} && break; sleep 0.05; done; "
      "kill -TERM $pid; wait $pid; echo status=$?; cat {}",
      g_program, config.string(), checks, log.string(), log.string(), log.string()));
  EXPECT_THAT(r.output, HasSubstr("status=143")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the workers stop at their next check and save a checkpoint"));
  // Both workers get it from the launcher, but one may reach a check the other has just passed
  // without it (then "on 1 of 2 workers"): either way they stop together at that check.
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("stopped by signal 15 \\(Terminated\\) on [12] of 2 workers after step"));
  EXPECT_THAT(r.output, HasSubstr("job stopped: stopped by signal 15"));
  EXPECT_THAT(r.output, Not(HasSubstr("killed by signal")));

  // The launcher killed outright (SIGKILL): its processes get SIGTERM from the kernel and still
  // stop at a step with a checkpoint, though the store they would tell each other through may
  // be gone with it. They used to wait cluster.start_timeout_s for it and end without one.
  const fs::path orphaned = scratch() / "wd_signal_orphaned";
  fs::remove_all(orphaned);
  const fs::path config_k = scratch() / "wd_signal_orphaned.yaml";
  std::ofstream(config_k) << wide_deep_job("wd_signal_orphaned", 32, cluster);
  const fs::path log_k = scratch() / "wd_signal_orphaned.log";
  // A script file: pgrep must not find the config's path on the shell's own command line.
  const fs::path script = scratch() / "wd_signal_orphaned.sh";
  std::ofstream(script) << fmt::format(
      "{0} {1} {2} --set train.epochs=50 --set train.max_steps=0 --set cluster.start_timeout_s=60 > {3} 2>&1 &\n"
      "pid=$!\n"
      "for i in $(seq 1200); do grep -q 'step 20/' {3} && break; sleep 0.05; done\n"
      "kill -9 $pid; start=$(date +%s)\n"
      "for i in $(seq 400); do pgrep -f -- '{1}' > /dev/null || break; sleep 0.1; done\n"
      "echo gone_after=$(( $(date +%s) - start ))\n"
      "pkill -9 -f -- '{1}'\n"
      "tail -5 {3}\n",
      g_program, config_k.string(), checks, log_k.string());
  const auto k = aiacc::testing::run_command("bash " + script.string());
  EXPECT_THAT(k.output, HasSubstr("gone_after=")) << k.output;
  const auto gone = k.output.find("gone_after=");
  EXPECT_LT(std::stoi(k.output.substr(gone + 11)), 20) << k.output;
  bool checkpointed = false;
  if (fs::exists(orphaned / "checkpoints")) {
    for (const auto& entry : fs::directory_iterator(orphaned / "checkpoints")) {
      checkpointed = checkpointed || fs::exists(entry.path() / "manifest.json");
    }
  }
  EXPECT_TRUE(checkpointed) << k.output;
}

TEST(DistributedTrain, AKilledShardStopsTheJobOrTheJobRestartsFromItsNewestCheckpoint) {
  // Rank 2 is the parameter-server shard holding the wide.* tables; it dies at a push of step 14.
  const std::string cluster = "  workers: 2\n  servers: 1\n  placement: [{match: 'wide.*', place: ps}]\n";
  auto whole = train("wd_shard_whole", wide_deep_job("wd_shard_whole", 32, cluster));
  ASSERT_EQ(whole.status, 0) << whole.output;

  auto stopped = train("wd_shard_stop", wide_deep_job("wd_shard_stop", 32, cluster), "AIACC_TEST_KILL_AT=2:13");
  EXPECT_NE(stopped.status, 0) << stopped.output;
  EXPECT_THAT(stopped.output, HasSubstr("job failed: server 0 (pid"));
  EXPECT_THAT(stopped.output, HasSubstr("killed by signal 9"));

  // max_restarts: the launcher starts the job again; it resumes from step 10 and ends exactly
  // where the uninterrupted run did (only steps 11-13 are computed twice).
  auto restarted = train("wd_shard_restart",
                         wide_deep_job("wd_shard_restart", 32, cluster + "  max_restarts: 1\n"),
                         "AIACC_TEST_KILL_AT=2:13");
  ASSERT_EQ(restarted.status, 0) << restarted.output;
  EXPECT_THAT(restarted.output, HasSubstr("restarting the job (restart 1 of 1), from its newest complete checkpoint if "
                                          "it has one, after: server 0 (pid"));
  EXPECT_THAT(restarted.output, HasSubstr("resumed from"));
  expect_same_state("wd_shard_whole", "wd_shard_restart", 1e-6);

  // Restarting needs resume: auto.
  auto refused = train("wd_shard_never", wide_deep_job("wd_shard_never", 32, cluster + "  max_restarts: 1\n"),
                       "", "", "--set train.checkpoint.resume=never");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("cluster.max_restarts: 1 restarts a failed job"));

  // A configuration error that only the ranks find (data.drop_last: false with 2 workers) is
  // not restarted: it would fail alike every time.
  auto config_error = train("wd_shard_config", wide_deep_job("wd_shard_config", 32, cluster + "  max_restarts: 2\n"),
                            "", "", "--set data.drop_last=false");
  EXPECT_EQ(config_error.status, 2) << config_error.output;
  EXPECT_THAT(config_error.output, HasSubstr("not restarting"));
  EXPECT_THAT(config_error.output, Not(HasSubstr("restarting the job")));
}

TEST(DistributedTrain, WithoutASupervisorADeadShardStopsTheWorkersNamingIt) {
  // torchrun-style: 2 workers and a shard (rank 2) that dies at a push of step 6. The workers
  // see its connection drop and fail once cluster.ps.reconnect_grace_s has passed, naming it,
  // long before cluster.ps.timeout_s.
  const fs::path config = scratch() / "deadshard.yaml";
  std::ofstream(config) << wide_deep_job(
      "deadshard", 32,
      "  workers: 2\n  servers: 1\n  launcher: external\n  placement: [{match: 'wide.*', place: ps}]\n"
      "  ps: {timeout_s: 120, reconnect_grace_s: 2}\n");
  const std::string env = external_env(3, 23);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=2 AIACC_TEST_KILL_AT=2:5 {env} {prog} {cfg} > {out}.2 2>&1 &); "
      "(RANK=1 {env} {prog} {cfg} > {out}.1 2>&1; echo status $? >> {out}.1) & "
      "RANK=0 {env} {prog} {cfg} 2>&1; echo status $?; wait; cat {out}.1",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "deadshard.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("status 0")));
  EXPECT_THAT(r.output, HasSubstr("ps shard 0"));
  EXPECT_THAT(r.output, HasSubstr("connection to the shard was lost"));
  EXPECT_LT(seconds, 2.0 + 15.0) << r.output;
}

TEST(DistributedTrain, StartUpCheckNamesTheRankWithADifferentConfig) {
  // Two processes joined through torchrun-style variables, one with a different learning rate.
  const fs::path config = scratch() / "mismatch.yaml";
  std::ofstream(config) << mlp_job("mismatch", 32, "  workers: 2\n  launcher: external\n");
  const std::string env = external_env(2, 7);
  auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=1 {env} {prog} {cfg} --set optimizer.lr=0.07 > {out}.1 2>&1 &); "
      "RANK=0 {env} {prog} {cfg} > {out}.0 2>&1; echo status $?; sleep 1; cat {out}.0 {out}.1",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "mismatch.out").string())));
  EXPECT_THAT(r.output, HasSubstr("status 2"));
  EXPECT_THAT(r.output, HasSubstr("start-up check failed"));
  EXPECT_THAT(r.output, HasSubstr("worker 1"));
  EXPECT_THAT(r.output, HasSubstr("optimizer.lr: worker 0 has 'lr: 0.05', it has 'lr: 0.07'"));
  // Worker 1 says so too, at once: it used to wait for the store worker 0 took with it when it
  // left, until cluster.start_timeout_s, and then blame the rendezvous.
  const std::string::size_type first = r.output.find("start-up check failed");
  EXPECT_NE(r.output.find("start-up check failed", first + 1), std::string::npos) << r.output;
}

// A small Criteo-style job whose data path (d/train.tsv, d/test.tsv) is relative, so workers
// started in different folders read different files: writes `train_rows` examples into
// <scratch>/<folder>/d (none: the folder without data) and returns the config's path.
fs::path relative_data_job(const std::string& name, const std::vector<std::pair<std::string, int>>& folders,
                           const std::string& cluster_extra = "") {
  for (const auto& [folder, train_rows] : folders) {
    fs::create_directories(scratch() / folder);
    if (train_rows == 0) continue;
    fs::create_directories(scratch() / folder / "d");
    std::ofstream train(scratch() / folder / "d" / "train.tsv");
    std::ofstream test(scratch() / folder / "d" / "test.tsv");
    for (int i = 0; i < train_rows; ++i) train << i % 2 << "\t1\t2\t3\ta" << i % 7 << "\tb" << i % 5 << "\n";
    for (int i = 0; i < 40; ++i) test << i % 2 << "\t1\t2\t3\ta" << i % 7 << "\tb" << i % 5 << "\n";
  }
  const fs::path config = scratch() / (name + ".yaml");
  std::ofstream(config) << fmt::format(R"(job: {{name: {}, run_dir: {}}}
model: {{type: wide_deep, wide_deep: {{embedding_dim: 4, hidden: [8]}}}}
data:
  batch_size: 16
  train: {{type: criteo_tsv, criteo_tsv: {{train_file: d/train.tsv, num_integer: 3, num_categorical: 2}}}}
  test: {{type: criteo_tsv, criteo_tsv: {{test_file: d/test.tsv, num_integer: 3, num_categorical: 2}}}}
train: {{epochs: 1}}
cluster: {{workers: 2, launcher: external{}}}
)",
                                       name, scratch().string(), cluster_extra);
  return config;
}

// Runs `config` as ranks 0 and 1 under torchrun-style variables (`salt`: external_env's), rank r
// in <scratch>/<name>r, so that relative data paths resolve to each folder's files. The output:
// rank 0's exit status ("status N"), then both ranks' logs.
aiacc::testing::CommandResult run_two_ranks_in_folders(const std::string& name, const fs::path& config, int salt) {
  return aiacc::testing::run_command(fmt::format(
      "(cd {dir}1 && RANK=1 {env} {prog} {cfg} > {out}.1 2>&1 &); "
      "cd {dir}0 && RANK=0 {env} {prog} {cfg} > {out}.0 2>&1; echo status $?; sleep 1; cat {out}.0 {out}.1",
      fmt::arg("dir", (scratch() / name).string()), fmt::arg("env", external_env(2, salt)),
      fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / (name + ".out")).string())));
}

// The same config whose relative data path resolves to files of different sizes on the two
// workers (started in different folders): the start-up check names the data sizes, where the
// workers used to train different step counts and fail later waiting for each other.
TEST(DistributedTrain, StartUpCheckNamesWorkersReadingDataOfDifferentSizes) {
  const fs::path config = relative_data_job("datasize", {{"datasize0", 200}, {"datasize1", 100}});
  const auto r = run_two_ranks_in_folders("datasize", config, 37);
  EXPECT_THAT(r.output, HasSubstr("status 2"));
  EXPECT_THAT(r.output, HasSubstr("the data size (data.train, data.test) of worker 1 differs from worker 0's"));
  EXPECT_THAT(r.output, HasSubstr("worker 0 has 'train: 200 examples, 6 steps per epoch', it has 'train: 100 "
                                  "examples, 3 steps per epoch'"));
}

// The same examples count on both workers, but worker 1's training file is another one (a stale
// copy on its host): the start-up check names the files, where the workers used to train on
// different data without a word.
TEST(DistributedTrain, StartUpCheckNamesWorkersReadingOtherFilesOfTheSameSize) {
  const fs::path config = relative_data_job("datafiles", {{"datafiles0", 200}, {"datafiles1", 200}});
  {
    std::ofstream other(scratch() / "datafiles1" / "d" / "train.tsv");
    for (int i = 0; i < 200; ++i) other << i % 2 << "\t10\t20\t30\ta" << i % 7 << "\tb" << i % 5 << "\n";
  }
  const auto size_of = [](const std::string& folder) {
    return fmt::format("d/train.tsv, {} bytes", fs::file_size(scratch() / folder / "d" / "train.tsv"));
  };
  const auto r = run_two_ranks_in_folders("datafiles", config, 43);
  EXPECT_THAT(r.output, HasSubstr("status 2"));
  EXPECT_THAT(r.output, Not(HasSubstr("data size (data.train, data.test) of worker 1 differs")));
  EXPECT_THAT(r.output, HasSubstr("the data file list (data.train, data.test) of worker 1 differs from worker 0's"));
  EXPECT_THAT(r.output, HasSubstr(size_of("datafiles0")));
  EXPECT_THAT(r.output, HasSubstr(size_of("datafiles1")));
}

// Under an outer launcher a worker that fails before it reaches the start-up data check (its
// data missing on its host: started in another folder) tells the rendezvous store, and worker
// 0, waiting there for its data size, stops at once naming it, not at cluster.start_timeout_s.
TEST(DistributedTrain, AWorkerFailingAtStartEndsTheWaitingWorkersAtOnceNamingIt) {
  const fs::path config = relative_data_job("abort", {{"abort0", 200}, {"abort1", 0}}, ", start_timeout_s: 60");
  const std::string env = external_env(2, 41);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "(cd {dir}1 && RANK=1 {env} {prog} {cfg} > {out}.1 2>&1; echo status $? >> {out}.1) & "
      "cd {dir}0 && RANK=0 {env} {prog} {cfg} > {out}.0 2>&1; echo status $? >> {out}.0; wait; cat {out}.0 {out}.1",
      fmt::arg("dir", (scratch() / "abort").string()), fmt::arg("env", env), fmt::arg("prog", g_program),
      fmt::arg("cfg", config.string()), fmt::arg("out", (scratch() / "abort.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << r.output;
  // Worker 1's own error, and worker 0's naming worker 1 and carrying its error.
  EXPECT_THAT(r.output, HasSubstr("d/train.tsv"));
  EXPECT_THAT(r.output, HasSubstr("rendezvous: rank 1 failed: "));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("timed out")));
  // A missing data file is a configuration error (no restart mends it), on both.
  EXPECT_THAT(r.output, HasSubstr("status 2\n"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("status 1\n")));
}

// Two local workers sharing a column cache (data.*.criteo_tsv.cache_dir): at the first start one
// parses and writes it while the other waits and maps it; at the second both map it. Both runs
// end bit for bit where a run that parsed in each worker ends.
TEST(DistributedTrain, WorkersSharingAColumnCacheTrainAsWorkersThatParse) {
  const fs::path data = scratch() / "colcache-data";
  fs::create_directories(data);
  {
    std::ofstream train(data / "train.tsv");
    std::ofstream test(data / "test.tsv");
    for (int i = 0; i < 900; ++i) {
      train << (i % 3 == 0) << "\t" << i % 13 << "\t\t" << i * 7 % 100 << "\t" << fmt::format("{:08x}", i % 37) << "\t"
            << (i % 9 == 0 ? std::string() : fmt::format("{:08x}", i % 11)) << "\n";
    }
    for (int i = 0; i < 50; ++i) test << i % 2 << "\t1\t2\t3\t" << fmt::format("{:08x}\t{:08x}", i % 37, i % 11) << "\n";
  }
  auto job = [&](const std::string& name, const std::string& cache) {
    const std::string options = fmt::format("num_integer: 3, num_categorical: 2{}",
                                            cache.empty() ? std::string() : ", cache_dir: " + cache);
    return fmt::format(R"(job: {{name: {0}, run_dir: {1}, seed: 3}}
model: {{type: wide_deep, wide_deep: {{embedding_dim: 4, hidden: [8]}}}}
data:
  batch_size: 16
  train: {{type: criteo_tsv, criteo_tsv: {{train_file: {2}/train.tsv, {3}}}}}
  test: {{type: criteo_tsv, criteo_tsv: {{test_file: {2}/test.tsv, {3}}}}}
optimizer: {{type: sgd, lr: 0.05, momentum: 0.9}}
train: {{epochs: 1, max_steps: {4}, eval_each_epoch: false, checkpoint: {{at_end: true, resume: never}}}}
cluster: {{workers: 2}}
)",
                       name, scratch().string(), data.string(), options, kSteps);
  };
  auto parsed = train("colcache_parsed", job("colcache_parsed", ""));
  ASSERT_EQ(parsed.status, 0) << parsed.output;
  const std::string cache = (scratch() / "colcache").string();
  auto first = train("colcache_first", job("colcache_first", cache));
  ASSERT_EQ(first.status, 0) << first.output;
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // Train and test: each written by one worker and mapped by the other.
  EXPECT_EQ(count(first.output, "written to the column cache"), 2) << first.output;
  EXPECT_EQ(count(first.output, "mapped from the column cache " + cache), 2) << first.output;
  auto second = train("colcache_second", job("colcache_second", cache));
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_EQ(count(second.output, "written to the column cache"), 0) << second.output;
  EXPECT_EQ(count(second.output, "mapped from the column cache " + cache), 4) << second.output;
  expect_same_state("colcache_parsed", "colcache_first", 0.0);
  expect_same_state("colcache_parsed", "colcache_second", 0.0);
}

TEST(DistributedTrain, WithoutASupervisorAWorkerDeathEndsEveryProcessIncludingTheShards) {
  // torchrun-style: worker 1 dies after step 5. Worker 0 fails naming it; the shard (rank 2),
  // which only the workers would have stopped, sees a worker's connection gone for
  // cluster.ps.reconnect_grace_s and exits too: nobody is left hanging.
  const fs::path config = scratch() / "orphanshard.yaml";
  std::ofstream(config) << wide_deep_job(
      "orphanshard", 32,
      "  workers: 2\n  servers: 1\n  launcher: external\n  placement: [{match: 'wide.*', place: ps}]\n"
      "  ps: {timeout_s: 120, reconnect_grace_s: 2}\n");
  const std::string env = external_env(3, 31);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=2 {env} {prog} {cfg} > {out}.2 2>&1; echo status $? >> {out}.2) & "
      "(RANK=1 AIACC_TEST_KILL_AT=1:5 {env} {prog} {cfg} > {out}.1 2>&1 &); "
      "RANK=0 {env} {prog} {cfg} > {out}.0 2>&1; echo status $? >> {out}.0; wait; "
      "cat {out}.0; echo ----; cat {out}.2",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "orphanshard.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto split = r.output.find("----");
  ASSERT_NE(split, std::string::npos) << r.output;
  const std::string worker0 = r.output.substr(0, split), shard = r.output.substr(split);
  EXPECT_THAT(worker0, HasSubstr("status 1"));
  // Worker 0 is waiting on the shard for worker 1's push, so the shard's answer names it.
  EXPECT_THAT(worker0, ::testing::ContainsRegex("rank\\(s\\) 1 died|rank 1|waiting for workers 1"));
  EXPECT_THAT(shard, HasSubstr("status 1"));
  EXPECT_THAT(shard, HasSubstr("worker connections closed"));
  EXPECT_LT(seconds, 2.0 + 15.0) << r.output;
}

TEST(DistributedTrain, RanksOnDifferentInterfacesAgreeAndAnUnencryptedRingTrainsTheSame) {
  // Each host binds its own address (as --emit arranges): not a configuration difference. The
  // TCP ring (not hierarchical) runs under CURVE, then as plain TCP with token-proving
  // handshakes (cluster.security.encrypt_ring: false): the same bits either way.
  const fs::path config = scratch() / "interfaces.yaml";
  std::ofstream(config) << mlp_job("interfaces", 32, "  workers: 2\n  launcher: external\n  ring: {hierarchical: false}\n");
  auto run = [&](const std::string& name, const std::string& args, int salt) {
    const std::string env = external_env(2, salt);
    return aiacc::testing::run_command(fmt::format(
        "(RANK=1 {env} {prog} {cfg} {args} --set cluster.ring.interface=127.0.0.2 > {out}.1 2>&1; "
        "echo status $? >> {out}.1) & "
        "RANK=0 {env} {prog} {cfg} {args} > {out}.0 2>&1; echo status $? >> {out}.0; wait; cat {out}.0 {out}.1",
        fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
        fmt::arg("args", "--set job.name=" + name + " " + args),
        fmt::arg("out", (scratch() / (name + ".out")).string())));
  };
  for (const auto& [name, args] : {std::pair<std::string, std::string>{"interfaces", ""},
                                   {"interfaces_plain", "--set cluster.security.encrypt_ring=false"}}) {
    auto r = run(name, args, 29 + static_cast<int>(name.size()));
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("start-up check failed"))) << r.output;
    EXPECT_THAT(r.output, ::testing::Not(::testing::ContainsRegex("status [1-9]"))) << r.output;
    EXPECT_THAT(r.output, HasSubstr("done: 20 steps"));
    if (!args.empty()) {
      EXPECT_THAT(r.output, HasSubstr("the dense ring runs unencrypted TCP"));
    }
  }
  expect_same_state("interfaces", "interfaces_plain", 0.0);
}

TEST(DistributedTrain, WithoutASupervisorASurvivorFailsSoonNamingTheDeadPeer) {
  // torchrun-style ranks with nobody to stop them: worker 1 is killed after step 5; worker 0
  // must fail (not hang) well within cluster.ring.timeout_s, naming rank 1.
  const fs::path config = scratch() / "orphan.yaml";
  std::ofstream(config) << mlp_job("orphan", 32, "  workers: 2\n  launcher: external\n  ring: {timeout_s: 20}\n");
  const std::string env = external_env(2, 13);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=1 AIACC_TEST_KILL_AT=1:5 {env} {prog} {cfg} > {out}.1 2>&1 &); "
      "RANK=0 {env} {prog} {cfg} 2>&1; echo status $?",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "orphan.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(r.output, HasSubstr("status 1"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("rank\\(s\\) 1 died|rank 1"));
  EXPECT_LT(seconds, 20.0) << r.output;
}

TEST(DistributedTrain, ASilentPeerGivesATimeoutNamingIt) {
  // Worker 1 freezes (SIGSTOP) after step 5: its connections stay open, so only the deadline
  // can tell. Worker 0 must fail within cluster.ring.timeout_s plus a few seconds, naming rank 1.
  const fs::path config = scratch() / "frozen.yaml";
  // Not hierarchical: the TCP ring, whose connections a frozen process keeps open.
  std::ofstream(config) << mlp_job("frozen", 32, "  workers: 2\n  launcher: external\n  ring: {timeout_s: 4, hierarchical: false}\n");
  const std::string env = external_env(2, 17);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "RANK=1 AIACC_TEST_KILL_AT=1:5:stop {env} {prog} {cfg} > {out}.1 2>&1 & frozen=$!; "
      "RANK=0 {env} {prog} {cfg} 2>&1; echo status $?; kill -9 $frozen",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "frozen.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(r.output, HasSubstr("status 1"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("timed out after [0-9.]+ s: (send to|recv from) rank 1"));
  EXPECT_THAT(r.output, HasSubstr("all-reducing gradients"));
  EXPECT_LT(seconds, 4.0 + 12.0) << r.output;
}

TEST(DistributedTrain, AFrozenWorkerIsNamedThoughANeighbourBetweenTimesOutFirst) {
  // A flat ring of 3 whose worker 1 freezes (SIGSTOP) after step 5: worker 0 waits for worker
  // 2, which waits for worker 1, so worker 0's timeout alone names a healthy rank, and so may
  // the job's first failure. Whichever worker fails first must name worker 1 as the likely cause.
  // Hidden layers large enough (1 MiB of gradients) for the ring algorithm: below 512 KiB,
  // recursive doubling makes worker 0 wait for worker 1 itself.
  std::string yaml = mlp_job("frozen_of_3", 32, "  workers: 3\n  ring: {timeout_s: 4, hierarchical: false}\n");
  const std::string hidden = "hidden: [64, 32]";
  ASSERT_NE(yaml.find(hidden), std::string::npos);
  yaml.replace(yaml.find(hidden), hidden.size(), "hidden: [256, 256]");
  auto r = train("frozen_of_3", yaml, "AIACC_TEST_KILL_AT=1:5:stop");
  EXPECT_NE(r.status, 0) << r.output;
  const auto failed = r.output.find("job failed");
  ASSERT_NE(failed, std::string::npos) << r.output;
  const std::string line = r.output.substr(failed, r.output.find('\n', failed) - failed);
  EXPECT_THAT(line, HasSubstr("timed out after"));
  EXPECT_THAT(line, HasSubstr("ring allreduce"));
  EXPECT_THAT(line, HasSubstr("rank 1 is likely the cause, stopped or stuck")) << r.output;
}

TEST(DistributedTrain, WithoutASupervisorAWorkerNamesTheFrozenRankBehindItsNeighbour) {
  // torchrun-style ranks, whose own logs are all a user has: in a flat ring of 3, worker 1
  // freezes after step 5; worker 0 times out waiting for worker 2, which waits for worker 1.
  // Worker 0's error must say so and name worker 1, within its timeout, the wait chain's
  // window (3 s) and the store's linger after a failure (3 s) and a margin.
  const fs::path config = scratch() / "frozen_chain.yaml";
  std::string yaml = mlp_job("frozen_chain", 32, "  workers: 3\n  launcher: external\n  ring: {timeout_s: 4, hierarchical: false}\n");
  const std::string hidden = "hidden: [64, 32]";  // 1 MiB of gradients: the ring algorithm
  ASSERT_NE(yaml.find(hidden), std::string::npos);
  yaml.replace(yaml.find(hidden), hidden.size(), "hidden: [256, 256]");
  std::ofstream(config) << yaml;
  const std::string env = external_env(3, 61);
  const auto start = std::chrono::steady_clock::now();
  auto r = aiacc::testing::run_command(fmt::format(
      "RANK=1 AIACC_TEST_KILL_AT=1:5:stop {env} {prog} {cfg} > {out}.1 2>&1 & frozen=$!; "
      "RANK=2 {env} {prog} {cfg} > {out}.2 2>&1 & other=$!; "
      "RANK=0 {env} {prog} {cfg} 2>&1; echo status $?; kill -9 $frozen; wait $other",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "frozen_chain.out").string())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(r.output, HasSubstr("status 1"));
  EXPECT_THAT(r.output, HasSubstr("s: recv from rank 2 (dense ring stream 0, from rank 2 to this rank;"));
  EXPECT_THAT(r.output, HasSubstr("wait chain: rank 2 was itself waiting for rank 1 (all-reducing gradients), which "
                                  "reported nothing"));
  EXPECT_THAT(r.output, HasSubstr("rank 1 is likely the cause, stopped or stuck"));
  EXPECT_LT(seconds, 4.0 + 3.0 + 3.0 + 12.0) << r.output;
}

TEST(DistributedTrain, OnlyProcessesWithTheJobTokenAreAdmitted) {
  const fs::path config = scratch() / "tokens.yaml";
  std::ofstream(config) << mlp_job("tokens", 32, "  workers: 2\n  launcher: external\n  start_timeout_s: 4\n");
  const std::string env = external_env(2, 19, /*token=*/false);
  // No token under an outer launcher: a configuration error that says how to give one.
  auto none = aiacc::testing::run_command(
      fmt::format("RANK=0 {} {} {} 2>&1; echo status $?", env, g_program, config.string()));
  EXPECT_THAT(none.output, HasSubstr("status 2"));
  EXPECT_THAT(none.output, HasSubstr("AIACC_JOB_TOKEN"));
  EXPECT_THAT(none.output, HasSubstr("cluster.security.token_file"));
  // Worker 1 holds another job's token: it cannot join, worker 0 (which serves the rendezvous
  // store) logs the refusal, and both fail at the start-up deadline instead of hanging.
  auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=1 AIACC_JOB_TOKEN=another-jobs-token-9876543210-abcdef {env} {prog} {cfg} > {out}.1 2>&1; "
      "echo status $? >> {out}.1) & "
      "RANK=0 {token} {env} {prog} {cfg} > {out}.0 2>&1; echo status $? >> {out}.0; wait; "
      "cat {out}.0; echo ----; cat {out}.1",
      fmt::arg("token", kTokenEnv), fmt::arg("env", env), fmt::arg("prog", g_program),
      fmt::arg("cfg", config.string()), fmt::arg("out", (scratch() / "tokens.out").string())));
  const auto split = r.output.find("----");
  ASSERT_NE(split, std::string::npos) << r.output;
  const std::string rank0 = r.output.substr(0, split), rank1 = r.output.substr(split);
  EXPECT_THAT(rank0, HasSubstr("refused a connection"));
  EXPECT_THAT(rank0, HasSubstr("another job token"));
  EXPECT_THAT(rank0, HasSubstr("status 1"));
  EXPECT_THAT(rank1, HasSubstr("status 1"));
  EXPECT_THAT(rank1, HasSubstr("timed out"));
}

TEST(DistributedTrain, NonFiniteGradientsStopTheJobOrSkipTheStepByConfig) {
  // A batch of NaN features at step 5 on both workers (dense on the ring, rows on a shard).
  const std::string cluster = "  workers: 2\n  servers: 1\n  placement: [{match: 'deep.*', place: ps}]\n";
  auto stop = train("wd_nan_stop", wide_deep_job("wd_nan_stop", 32, cluster), "AIACC_TEST_NAN_AT=5");
  EXPECT_NE(stop.status, 0) << stop.output;
  EXPECT_THAT(stop.output, HasSubstr("nan at step 5"));
  EXPECT_THAT(stop.output, HasSubstr("train.non_finite: skip"));

  auto skip = train("wd_nan_skip", wide_deep_job("wd_nan_skip", 32, cluster), "AIACC_TEST_NAN_AT=5", "",
                    "--set train.non_finite=skip");
  ASSERT_EQ(skip.status, 0) << skip.output;
  EXPECT_THAT(skip.output, HasSubstr("step 5 skipped: the gradient of"));
  int checked = 0;
  for (const auto& [name, tensor] : final_checkpoint("wd_nan_skip")) {
    if (tensor.dtype() != aiacc::DType::f32) continue;
    for (std::int64_t i = 0; i < tensor.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(tensor.data<float>()[i])) << name << "[" << i << "]";
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);

  // A table whose gradient was not finite pushes no rows: its rows and their optimiser state
  // stay as they were, under sparse Adam here, whose moments and row steps the push of zero
  // rows it made before moved. Those are the wide tables (the NaN features reach them through
  // the wide part's linear term; the deep MLP's ReLUs turn them into zero gradients, which are
  // finite and pushed). The rows of the step-5 checkpoint are compared in the step-6 one (step 6
  // skipped; rows it pulled for the first time are new there).
  auto adam = train("wd_nan_adam", wide_deep_job("wd_nan_adam", 32, cluster, "adam"), "AIACC_TEST_NAN_AT=6", "",
                    "--set train.non_finite=skip --set train.max_steps=6 --set train.checkpoint.every_steps=1");
  ASSERT_EQ(adam.status, 0) << adam.output;
  EXPECT_THAT(adam.output, HasSubstr("step 6 skipped"));
  const auto before = final_checkpoint("wd_nan_adam", 5), after = final_checkpoint("wd_nan_adam", 6);
  int tables = 0;
  for (const auto& [name, ids] : before) {
    if (name.rfind("table/wide.", 0) != 0 || name.substr(name.size() - 4) != ".ids") continue;
    const std::string table = name.substr(0, name.size() - 4);
    const aiacc::Tensor& later_ids = after.at(name);
    std::map<std::int64_t, std::int64_t> later_row;
    for (std::int64_t r = 0; r < later_ids.numel(); ++r) later_row[later_ids.data<std::int64_t>()[r]] = r;
    for (const char* part : {".values", ".state"}) {
      const aiacc::Tensor& x = before.at(table + part);
      const aiacc::Tensor& y = after.at(table + part);
      const std::int64_t width = x.numel() / std::max<std::int64_t>(1, ids.numel());
      for (std::int64_t r = 0; r < ids.numel(); ++r) {
        const std::int64_t other = later_row.at(ids.data<std::int64_t>()[r]);
        for (std::int64_t j = 0; j < width; ++j) {
          ASSERT_EQ(x.data<float>()[r * width + j], y.data<float>()[other * width + j])
              << table << part << " of id " << ids.data<std::int64_t>()[r];
        }
      }
    }
    ++tables;
  }
  EXPECT_EQ(tables, 27);  // 26 fields and a cross
}

// Two workers with their models on devices (the fake accelerator, loaded as aiacc-train's CUDA
// plugin), parameters broadcast and batch-norm statistics averaged through host copies. The job
// ends exactly where the same job on the CPU ends:
// - the MLP with each worker on its own device (local rank r on cuda:r): dense gradients
//   all-reduced on the devices (the plugin's device collective, NCCL's stand-in); and with both
//   workers on cuda:2 (NCCL refuses that, so "auto" stages through host memory into the ring);
// - Wide&Deep with its tables on two parameter-server shards, on the devices and with
//   cluster.ring.device_collectives: host; forcing nccl onto one shared device, or onto a CPU
//   job, is refused by key.
TEST(DistributedTrain, TwoWorkersOnDevicesEqualTwoWorkersOnTheCpu) {
  if (g_fake_cuda_plugin.empty()) GTEST_SKIP() << "no fake CUDA plugin given (argv[2])";
  const std::string plugin = "AIACC_CUDA_PLUGIN=" + g_fake_cuda_plugin;
  auto cpu = train("mlp_2w_cpu", mlp_job("mlp_2w_cpu", 32, "  workers: 2\n"));
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  auto nccl_on_cpu = train("mlp_2w_cpu_nccl", mlp_job("mlp_2w_cpu_nccl", 32, "  workers: 2\n"), "", "",
                           "--set cluster.ring.device_collectives=nccl");
  EXPECT_NE(nccl_on_cpu.status, 0);
  EXPECT_THAT(nccl_on_cpu.output, HasSubstr("cluster.ring.device_collectives: nccl all-reduces GPU memory, but "
                                            "job.device is cpu"));
  auto device = train("mlp_2w_dev", mlp_job("mlp_2w_dev", 32, "  workers: 2\n"), plugin, "", "--set job.device=cuda");
  ASSERT_EQ(device.status, 0) << device.output;
  EXPECT_THAT(device.output, HasSubstr("fake CUDA plugin: device 0"));
  EXPECT_THAT(device.output, HasSubstr("fake CUDA plugin: device 1"));
  EXPECT_THAT(device.output, HasSubstr("dense gradients: all-reduced on the devices through the fake device "
                                       "collective on cuda:0"));
  expect_same_state("mlp_2w_cpu", "mlp_2w_dev", 0.0);
  auto join_failed = train("mlp_2w_join", mlp_job("mlp_2w_join", 32, "  workers: 2\n"),
                           plugin + " AIACC_TEST_DEVICE_COLLECTIVE_FAIL=1", "", "--set job.device=cuda");
  EXPECT_NE(join_failed.status, 0);
  EXPECT_THAT(join_failed.output, HasSubstr("cluster.ring.device_collectives: auto on cuda:"));
  EXPECT_THAT(join_failed.output, HasSubstr("Duplicate GPU detected"));
  auto staged = train("mlp_2w_host", mlp_job("mlp_2w_host", 32, "  workers: 2\n"), plugin, "", "--set job.device=cuda:2");
  ASSERT_EQ(staged.status, 0) << staged.output;
  EXPECT_THAT(staged.output, HasSubstr("fake CUDA plugin: device 2"));
  EXPECT_THAT(staged.output, Not(HasSubstr("all-reduced on the devices")));
  expect_same_state("mlp_2w_cpu", "mlp_2w_host", 0.0);
  // Gradient accumulation: the micro-batches summed on the device, then all-reduced by the
  // device collective, or copied once a step to the host twins for the host ring.
  const std::string accumulate = " --set train.gradient_accumulation_steps=2";
  auto acc_cpu = train("mlp_2w_acc_cpu", mlp_job("mlp_2w_acc_cpu", 16, "  workers: 2\n"), "", "", accumulate);
  ASSERT_EQ(acc_cpu.status, 0) << acc_cpu.output;
  auto acc_device = train("mlp_2w_acc_dev", mlp_job("mlp_2w_acc_dev", 16, "  workers: 2\n"), plugin, "",
                          "--set job.device=cuda" + accumulate);
  ASSERT_EQ(acc_device.status, 0) << acc_device.output;
  EXPECT_THAT(acc_device.output, HasSubstr("all-reduced on the devices"));
  expect_same_state("mlp_2w_acc_cpu", "mlp_2w_acc_dev", 0.0);
  auto acc_staged = train("mlp_2w_acc_host", mlp_job("mlp_2w_acc_host", 16, "  workers: 2\n"), plugin, "",
                          "--set job.device=cuda:2" + accumulate);
  ASSERT_EQ(acc_staged.status, 0) << acc_staged.output;
  expect_same_state("mlp_2w_acc_cpu", "mlp_2w_acc_host", 0.0);
  // ... and within rounding of the same global batch without accumulation.
  expect_same_state("mlp_2w_cpu", "mlp_2w_acc_cpu", 1e-5);

  const std::string cluster = "  workers: 2\n  servers: 2\n";
  auto wd_cpu = train("wd_2w_cpu", wide_deep_job("wd_2w_cpu", 32, cluster));
  ASSERT_EQ(wd_cpu.status, 0) << wd_cpu.output;
  auto wd_device = train("wd_2w_dev", wide_deep_job("wd_2w_dev", 32, cluster), plugin, "", "--set job.device=cuda");
  ASSERT_EQ(wd_device.status, 0) << wd_device.output;
  EXPECT_THAT(wd_device.output, HasSubstr("fake CUDA plugin: device 1"));
  EXPECT_THAT(wd_device.output, HasSubstr("all-reduced on the devices"));
  expect_same_state("wd_2w_cpu", "wd_2w_dev", 0.0);
  auto wd_staged = train("wd_2w_host", wide_deep_job("wd_2w_host", 32, cluster), plugin, "",
                         "--set job.device=cuda --set cluster.ring.device_collectives=host");
  ASSERT_EQ(wd_staged.status, 0) << wd_staged.output;
  EXPECT_THAT(wd_staged.output, Not(HasSubstr("all-reduced on the devices")));
  expect_same_state("wd_2w_cpu", "wd_2w_host", 0.0);
  auto refused = train("wd_2w_nccl", wide_deep_job("wd_2w_nccl", 32, cluster), plugin, "",
                       "--set job.device=cuda:3 --set cluster.ring.device_collectives=nccl");
  EXPECT_NE(refused.status, 0);
  EXPECT_THAT(refused.output, HasSubstr("cluster.ring.device_collectives: nccl needs a GPU per worker, but "
                                        "job.device: cuda:3"));
}

// A worker's hot-row cache of parameter-server rows (async tables, cache_rows 64, staleness 2)
// with the deep tables' bags on a device: the device mirrors the cache's slots and each step
// copies over only the rows fetched into them (model.wide_deep.device_row_cache, the default).
// The job ends exactly where the same job on the CPU ends, with the mirror and without it.
TEST(DistributedTrain, AWorkerRowCacheMirroredOnTheDeviceTrainsAsOnTheCpu) {
  if (g_fake_cuda_plugin.empty()) GTEST_SKIP() << "no fake CUDA plugin given (argv[2])";
  const std::string plugin = "AIACC_CUDA_PLUGIN=" + g_fake_cuda_plugin;
  const std::string cluster =
      "  workers: 1\n  servers: 2\n  placement: [{match: '*', place: ps}]\n"
      "  ps: {consistency: async, cache_rows: 64, cache_staleness: 2}\n";
  // With an evaluation at the end: its read-only pulls bypass the cache, so the mirrored model
  // reads their rows as copied ones, and scores what the CPU model scores.
  auto cpu = train("wd_cache_cpu", wide_deep_job("wd_cache_cpu", 32, cluster), "", "", "--set train.eval_each_epoch=true");
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  auto mirrored = train("wd_cache_dev", wide_deep_job("wd_cache_dev", 32, cluster), plugin, "",
                        "--set job.device=cuda --set train.eval_each_epoch=true");
  ASSERT_EQ(mirrored.status, 0) << mirrored.output;
  EXPECT_THAT(mirrored.output, HasSubstr("wide_deep: device row cache of 1664 rows"));  // 26 tables x 64
  expect_same_state("wd_cache_cpu", "wd_cache_dev", 0.0);
  auto eval_of = [](const std::string& name) {
    std::ifstream metrics(scratch() / name / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.value("kind", "") == "eval") return record;
    }
    return nlohmann::json();
  };
  ASSERT_FALSE(eval_of("wd_cache_cpu").is_null());
  EXPECT_NEAR(eval_of("wd_cache_cpu").at("auc").get<double>(), eval_of("wd_cache_dev").at("auc").get<double>(), 1e-9);
  EXPECT_NEAR(eval_of("wd_cache_cpu").at("loss").get<double>(), eval_of("wd_cache_dev").at("loss").get<double>(), 1e-6);
  auto copied = train("wd_cache_copy", wide_deep_job("wd_cache_copy", 32, cluster), plugin, "",
                      "--set job.device=cuda --set model.wide_deep.device_row_cache=false");
  ASSERT_EQ(copied.status, 0) << copied.output;
  EXPECT_THAT(copied.output, Not(HasSubstr("device row cache")));
  expect_same_state("wd_cache_cpu", "wd_cache_copy", 0.0);
}

TEST(DistributedTrain, MpirunWithThreeProcessesMatchesTheLocalLauncher) {
  if (aiacc::testing::run_command("command -v mpirun >/dev/null 2>&1").status != 0) {
    GTEST_SKIP() << "mpirun (OpenMPI) is not installed";
  }
  const std::string cluster = "  workers: 2\n  servers: 1\n  master_port: {}\n  placement: [{{match: 'deep.*', place: ps}}]\n";
  auto local = train("wd_local3", wide_deep_job("wd_local3", 32, fmt::format(fmt::runtime(cluster), 0 + 29500)));
  ASSERT_EQ(local.status, 0) << local.output;
  const int port = rendezvous_port(0);
  auto mpi = train("wd_mpi3", wide_deep_job("wd_mpi3", 32, fmt::format(fmt::runtime(cluster), port)),
                   fmt::format("{} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                               "OMPI_MCA_plm_rsh_agent=", kTokenEnv),
                   "mpirun -np 3 -x AIACC_JOB_TOKEN --oversubscribe --bind-to none");
  ASSERT_EQ(mpi.status, 0) << mpi.output;
  EXPECT_THAT(mpi.output, HasSubstr("launcher: mpirun"));
  expect_same_state("wd_local3", "wd_mpi3", 1e-6);
}

// Launcher variables that say how many of the job's processes share this machine: the tests
// below start ranks as a hand-made torchrun-style environment does, without them.
constexpr const char* kUnsetLocalCounts =
    "unset AIACC_LOCAL_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_SIZE LOCAL_WORLD_SIZE SLURM_NTASKS_PER_NODE OMP_NUM_THREADS; ";

// Two torchrun-style ranks (no LOCAL_WORLD_SIZE) on one host share its cores as the local
// launcher's ranks do, counting each other at the rendezvous store: each took every core
// (2 threads each on 2 cores, 37 times slower), and still trains to the local launcher's bits.
TEST(DistributedTrain, TorchrunStyleRanksWithoutLocalWorldSizeShareTheHostsCores) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const int threads = std::max(1, std::min(CPU_COUNT(&allowed), cores / 2));
  const std::string expected = fmt::format("compute thread{} (job.threads 0)", threads == 1 ? "" : "s");
  auto local = train("threads_local", mlp_job("threads_local", 32, "  workers: 2\n"), kUnsetLocalCounts);
  ASSERT_EQ(local.status, 0) << local.output;
  EXPECT_THAT(local.output, HasSubstr(fmt::format("[worker 1] [trainer] {} {}", threads, expected)));

  const fs::path config = scratch() / "threads_torchrun.yaml";
  std::ofstream(config) << mlp_job("threads_torchrun", 32, "  workers: 2\n  launcher: external\n");
  const std::string env = external_env(2, 67);
  const auto r = aiacc::testing::run_command(fmt::format(
      "{unset}(RANK=1 {env} {prog} {cfg} > {out}.1 2>&1; echo status $? >> {out}.1) & "
      "RANK=0 {env} {prog} {cfg} > {out}.0 2>&1; echo status $? >> {out}.0; wait; cat {out}.0 {out}.1",
      fmt::arg("unset", kUnsetLocalCounts), fmt::arg("env", env), fmt::arg("prog", g_program),
      fmt::arg("cfg", config.string()), fmt::arg("out", (scratch() / "threads_torchrun.out").string())));
  EXPECT_THAT(r.output, Not(::testing::ContainsRegex("status [1-9]"))) << r.output;
  for (const int worker : {0, 1}) {
    EXPECT_THAT(r.output, HasSubstr(fmt::format("[worker {}] [trainer] {} {}: this host's {} cores shared by the 2 ranks "
                                                "counted on it at the rendezvous store", worker, threads, expected, cores)))
        << r.output;
  }
  expect_same_state("threads_local", "threads_torchrun", 0.0);
}

// MASTER_ADDR naming this host, resolving to loopback, is served on that loopback address: it
// was refused because only "localhost" and 127.* passed ("the rendezvous address vm:29621 is not
// loopback, but cluster.ring.interface is 127.0.0.1"), and the other ranks waited the start timeout.
TEST(DistributedTrain, AMasterAddrNameThatResolvesToLoopbackIsServedThere) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  std::string host, address;
  for (const std::string& candidate : {std::string(name), std::string("localhost.")}) {
    const auto resolved = aiacc::net::resolve_ipv4(candidate);
    if (candidate != "localhost" && aiacc::net::is_loopback_ipv4(resolved.address)) {
      host = candidate;
      address = resolved.address;
      break;
    }
  }
  if (host.empty()) GTEST_SKIP() << "neither this host's name '" << name << "' nor 'localhost.' resolves to loopback";
  const fs::path config = scratch() / "named_master.yaml";
  std::ofstream(config) << mlp_job("named_master", 32, "  workers: 2\n  launcher: external\n  start_timeout_s: 10\n");
  const std::string env = fmt::format("{} WORLD_SIZE=2 MASTER_ADDR={} MASTER_PORT={}", kTokenEnv, host, rendezvous_port(71));
  const auto r = aiacc::testing::run_command(fmt::format(
      "(RANK=1 {env} {prog} {cfg} --set train.max_steps=2 > {out}.1 2>&1; echo status $? >> {out}.1) & "
      "RANK=0 {env} {prog} {cfg} --set train.max_steps=2 > {out}.0 2>&1; echo status $? >> {out}.0; wait; "
      "cat {out}.0 {out}.1",
      fmt::arg("env", env), fmt::arg("prog", g_program), fmt::arg("cfg", config.string()),
      fmt::arg("out", (scratch() / "named_master.out").string())));
  EXPECT_THAT(r.output, Not(::testing::ContainsRegex("status [1-9]"))) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("serving the rendezvous store on tcp://{}:{}", address, rendezvous_port(71))));
  EXPECT_THAT(r.output, HasSubstr("done: 2 steps"));
}

// A rank whose rank 0 never serves the store (it failed before serving: a port in use, a config
// error; or it was never started) says so at the start timeout, naming MASTER_ADDR:MASTER_PORT
// and its value, not only "no answer from the rendezvous server".
TEST(DistributedTrain, ARankWhoseStoreNeverAnswersSaysRankZeroMayHaveFailedToStart) {
  const fs::path config = scratch() / "no_rank0.yaml";
  std::ofstream(config) << mlp_job("no_rank0", 32, "  workers: 2\n  launcher: external\n  start_timeout_s: 1\n");
  const auto r = aiacc::testing::run_command(
      fmt::format("RANK=1 {} {} {} 2>&1", external_env(2, 73), g_program, config.string()));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no answer from the rendezvous server"));
  EXPECT_THAT(r.output, HasSubstr(fmt::format("at MASTER_ADDR:MASTER_PORT (else cluster.master_addr:master_port), "
                                              "here 127.0.0.1:{}", rendezvous_port(73))));
  EXPECT_THAT(r.output, HasSubstr("nothing answered there within cluster.start_timeout_s (1 s): rank 0 may have failed to "
                                  "start (its log says why"));
}

// A multi-host job whose MASTER_ADDR resolves to loopback on rank 0's host (Debian and Ubuntu map
// the host's own name to 127.0.1.1 in /etc/hosts) beside a real cluster.ring.interface: rank 0
// served the store on 127.0.1.1 and the other hosts waited the start timeout for it. Refused now,
// naming MASTER_ADDR, its address and /etc/hosts; a loopback job is still served where its name
// resolves, and a real one on its interface.
TEST(DistributedTrain, AMasterAddrResolvingToLoopbackBesideARealInterfaceIsAConfigError) {
  using aiacc::trainer::rendezvous_bind_host;
  const aiacc::net::Ipv4Resolution loopback{"127.0.1.1", ""}, real{"10.1.2.3", ""}, none{"", "Name or service not known"};
  EXPECT_EQ(rendezvous_bind_host("MASTER_ADDR", "node-a", loopback, "127.0.0.1"), "127.0.1.1");
  EXPECT_EQ(rendezvous_bind_host("MASTER_ADDR", "node-a", real, "10.1.2.3"), "10.1.2.3");
  auto error_of = [&](const std::string& source, const aiacc::net::Ipv4Resolution& resolved, const std::string& interface) {
    try {
      rendezvous_bind_host(source, "node-a", resolved, interface);
    } catch (const aiacc::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string refused = error_of("MASTER_ADDR", loopback, "10.1.2.3");
  EXPECT_THAT(refused, HasSubstr("MASTER_ADDR=node-a resolves to the loopback address 127.0.1.1 on rank 0's host, but "
                                 "cluster.ring.interface is 10.1.2.3: the other hosts could not reach"));
  EXPECT_THAT(refused, HasSubstr("/etc/hosts"));
  EXPECT_THAT(refused, HasSubstr("set MASTER_ADDR to this host's address on the job's network (e.g. 10.1.2.3)"));
  EXPECT_THAT(error_of("cluster.master_addr", real, "127.0.0.1"),
              HasSubstr("cluster.master_addr=node-a is not loopback (it resolves to 10.1.2.3), but cluster.ring.interface "
                        "is 127.0.0.1"));
  EXPECT_THAT(error_of("MASTER_ADDR", none, "127.0.0.1"),
              HasSubstr("MASTER_ADDR=node-a is not loopback (it does not resolve here: Name or service not known)"));

  // The program: rank 0 says so at once (status 2), not after the start timeout.
  const fs::path config = scratch() / "loopback_master.yaml";
  std::ofstream(config) << mlp_job("loopback_master", 32, "  workers: 2\n  launcher: external\n  start_timeout_s: 5\n");
  const auto r = aiacc::testing::run_command(fmt::format("RANK=0 {} {} {} --set cluster.ring.interface=192.0.2.1 2>&1",
                                                         external_env(2, 75), g_program, config.string()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("MASTER_ADDR=127.0.0.1 resolves to the loopback address 127.0.0.1 on rank 0's host, "
                                  "but cluster.ring.interface is 192.0.2.1"));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/aiacc-train\n", argv[0]);
    return 2;
  }
  g_program = argv[1];
  if (argc > 2) g_fake_cuda_plugin = argv[2];
  return RUN_ALL_TESTS();
}
