// The job configuration: one typed section per module, composed here (the only place that sees
// them all). `configs/reference.yaml` is generated from these structs and a test keeps it in sync.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config/schema.h"
#include "core/log.h"
#include "core/optim/optimizer_options.h"
#include "core/optim/sparse_row_optimizer.h"
#include "data/data_options.h"
#include "models/model.h"
#include "tools/trainer/cluster_options.h"
#include "tools/trainer/early_stopping.h"

namespace aiacc::trainer {

// Compute threads one process may run (job.threads, OMP_NUM_THREADS). Far above any machine's
// cores: beyond it OpenMP's thread creation fails (50k: "Resource temporarily unavailable") or
// crashes (65536 and up) before any message could name the setting.
inline constexpr int kMaxComputeThreads = 1024;

struct JobSection {
  std::string name = "job";
  std::string run_dir = "runs";
  std::uint64_t seed = 1;
  int threads = 0;
  bool flush_denormals = true;
  std::string device = "cpu";
  std::string precision = "fp32";

  template <class V>
  void visit(V& v) {
    v.field("name", name, "job name; outputs go to <run_dir>/<name>", [](const std::string& value) {
      // A name is one folder inside run_dir: "../x" or "a/b" would put the run elsewhere.
      if (value.empty() || value == "." || value == ".." || value.find('/') != std::string::npos) {
        return std::string("expected a non-empty name without '/' (one folder inside run_dir)");
      }
      return std::string();
    });
    v.field("run_dir", run_dir, "folder for metrics, logs and checkpoints", config::non_empty());
    v.field("seed", seed, "seed of initialisation, shuffling and augmentation");
    v.field("threads", threads,
            "compute threads per process (0: OMP_NUM_THREADS when set, else the cores this process may use, "
            "shared among the job's processes on the machine; at most 1024)",
            config::in_range(0, kMaxComputeThreads));
    v.field("device", device,
            "where the model trains: cpu, cuda (GPU 0; with several workers, local rank r on GPU r) or cuda:N "
            "(every worker on GPU N); models mlp, resnet, wide_deep (its tables stay in host memory)",
            [](const std::string& text) {
              return Device::parse(text) ? std::string() : std::string("expected cpu, cuda or cuda:N");
            });
    v.field("precision", precision,
            "fp32, or bf16 / fp16: mixed precision on a GPU (channels-last activations of that type "
            "through cuDNN's Tensor Core kernels; weights, gradients and optimiser state stay fp32; fp16 "
            "adds dynamic loss scaling); resnet only",
            config::one_of({"fp32", "bf16", "fp16"}));
    v.field("flush_denormals", flush_denormals,
            "compute threads treat floats below 1.2e-38 as 0 (flush-to-zero): optimiser moments of idle "
            "weights otherwise decay into slow subnormal arithmetic");
  }
};

struct CheckpointOptions {
  std::int64_t every_steps = 0;
  bool at_end = true;
  int keep_last = 3;
  std::string resume = "auto";
  bool on_signal = true;
  std::int64_t signal_check_steps = 10;
  bool keep_best = false;

  template <class V>
  void visit(V& v) {
    v.field("every_steps", every_steps, "save a checkpoint every N steps (0: only at the end)",
            config::at_least<std::int64_t>(0));
    v.field("at_end", at_end, "save a checkpoint when training ends");
    v.field("keep_last", keep_last, "complete checkpoints to keep (0: all)", config::at_least(0));
    v.field("resume", resume,
            "auto: continue from the newest complete checkpoint in the run folder; never: start fresh (refused "
            "where the run folder holds an earlier run's checkpoints or metrics); overwrite: start fresh, first "
            "removing an earlier run's checkpoints, metrics.jsonl, config.yaml and traces from the run folder",
            config::one_of({"auto", "never", "overwrite"}));
    v.field("on_signal", on_signal,
            "SIGINT or SIGTERM (Ctrl-C, preemption): the workers stop together at the next multiple of "
            "signal_check_steps, save a checkpoint there (when at_end or every_steps saves any) and exit with "
            "128 + the signal; a second signal (over a second later) ends them at once. false: the signal ends them at once");
    v.field("keep_best", keep_best,
            "also save a checkpoint at every evaluation that is the best so far by train.early_stopping.metric "
            "(watched even with patience 0), and keep the best one outside keep_last");
    v.field("signal_check_steps", signal_check_steps,
            "on_signal: steps between the workers' checks for a stop signal (one all-reduce of three numbers each)",
            config::at_least<std::int64_t>(1));
  }
};

struct TrainOptions {
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;
  std::int64_t log_every_steps = 50;
  bool eval_each_epoch = true;
  std::int64_t eval_every_steps = 0;
  bool trace = false;
  double baseline_samples_per_s = 0;
  std::string non_finite = "stop";
  double clip_grad_norm = 0;
  std::int64_t gradient_accumulation_steps = 1;
  EarlyStoppingOptions early_stopping;
  CheckpointOptions checkpoint;

  template <class V>
  void visit(V& v) {
    v.field("epochs", epochs, "passes over the training data", config::at_least<std::int64_t>(1));
    v.field("max_steps", max_steps, "stop after this many steps (0: no limit)",
            config::at_least<std::int64_t>(0));
    v.field("log_every_steps", log_every_steps, "progress line interval in steps",
            config::at_least<std::int64_t>(1));
    v.field("eval_each_epoch", eval_each_epoch, "evaluate on the test split after every epoch");
    v.field("eval_every_steps", eval_every_steps,
            "also evaluate on the test split every N steps (0: off), before that step's checkpoint; an \"eval\" "
            "record each (\"within_epoch\": true unless the step ends an epoch), not training time; where "
            "eval_each_epoch evaluates at that step anyway, once",
            config::at_least<std::int64_t>(0));
    v.field("trace", trace,
            "record a Chrome/Perfetto trace of every worker (compute, each bucket's all-reduce, "
            "each parameter-server request) to <run_dir>/<name>/trace.json");
    v.field("non_finite", non_finite,
            "a NaN or Inf loss or gradient: stop (the job fails naming the tensor and step) or "
            "skip (the step's dense update is skipped on every worker and a warning names the tensor; "
            "sparse rows pushed during backward still apply, a NaN worker's own rows zeroed)",
            config::one_of({"stop", "skip"}));
    v.field("clip_grad_norm", clip_grad_norm,
            "before each dense optimiser step, scale the dense gradients (averaged over the workers) down to "
            "this global L2 norm when their norm is above it, as torch.nn.utils.clip_grad_norm_ (0: off); "
            "embedding rows are not clipped (their optimiser runs where they live)",
            config::at_least(0.0));
    v.field("gradient_accumulation_steps", gradient_accumulation_steps,
            "micro-batches of data.batch_size per step: their gradients are averaged into one optimiser step "
            "(a global batch of workers x batch_size x this); only the last one's backward all-reduces the dense "
            "gradients, and row gradients are pushed once a step (parameter-server rows are pulled for each); "
            "steps, schedules and checkpoints count optimiser steps",
            config::in_range<std::int64_t>(1, 4096));
    v.field("early_stopping", early_stopping,
            "stop once a test metric has not improved for `patience` evaluations in a row (a checkpoint is saved "
            "there with train.checkpoint.at_end; a resumed job that stopped early trains no further)");
    v.field("baseline_samples_per_s", baseline_samples_per_s,
            "throughput of this job on one worker, when known: the summary then reports scaling "
            "efficiency samples/s / (workers x baseline)", config::at_least(0.0));
    v.field("checkpoint", checkpoint, "checkpoints in <run_dir>/<name>/checkpoints (safetensors)");
  }
};

// The optimiser of sparse embedding rows, run where the rows live (local store or parameter
// servers). Adagrad is the usual choice for hashed CTR embeddings.
struct SparseOptimizerOptions : optim::OptimizerOptions {
  SparseOptimizerOptions() {
    type = "adagrad";
    lr = 0.05;
  }
  // The dense checks, and the rules that cannot update rows one at a time, named under this
  // section (SparseRowOptimizer would refuse them at start naming optimizer.type).
  void validate(const config::Node& node) const {
    optim::OptimizerOptions::validate(node);
    if (const std::string refusal = optim::sparse_rule_refusal(type); !refusal.empty()) {
      node.child("type").fail(refusal);
    }
  }
};

struct JobOptions {
  JobSection job;
  models::ModelOptions model;
  data::DataOptions data;
  optim::OptimizerOptions optimizer;
  SparseOptimizerOptions sparse_optimizer;
  TrainOptions train;
  ClusterOptions cluster;
  log::LogOptions log;

  template <class V>
  void visit(V& v) {
    v.field("job", job, "the job: name, outputs, seed, threads");
    v.field("model", model, "the model to train");
    v.field("data", data, "training and test data, batching, augmentation");
    v.field("optimizer", optimizer, "dense optimiser and learning-rate schedule");
    v.field("sparse_optimizer", sparse_optimizer,
            "optimiser of sparse embedding rows: sgd | adagrad | adam | ftrl (and its schedule)");
    v.field("train", train, "the training loop");
    v.field("cluster", cluster, "workers, parameter servers, launching and per-tensor placement");
    v.field("log", log, "log levels");
  }
};

// Reads and validates a job from `path` with `overrides` ("key=value") applied.
// Throws ConfigError naming file:line: key (or the --set text).
JobOptions load_job(const std::string& path, const std::vector<std::string>& overrides);

// The resolved job as YAML.
std::string resolved_yaml(const JobOptions& job);
// What every process of a job must agree on: the resolved config without the keys that differ
// between hosts by design (cluster.ring.interface: each rank's own address;
// cluster.security.token_file: where each host keeps the token).
std::string agreement_yaml(const JobOptions& job);

// configs/reference.yaml: every key, its default and its doc.
std::string reference_yaml();

// The device a worker trains on: job.device, except that in a job of several workers `cuda`
// (no index) puts the worker of local rank r on GPU r (one GPU per process, like torchrun's
// LOCAL_RANK), or on GPU 0 when its launcher gave it a GPU of its own (CUDA_VISIBLE_DEVICES
// names one device, under Slurm's --gpus-per-task or as the only process of the job on its
// machine), while `cuda:N` puts every worker on GPU N.
Device job_device(const JobOptions& job, int local_rank);

// Processes of this job on this machine, as its launcher says (the local launcher, mpirun,
// torchrun, srun --ntasks-per-node); nullopt when none does.
std::optional<int> local_process_count();

// Compute threads of one process with job.threads 0, and where that number came from (for the
// log line that states it).
struct ComputeThreads {
  int count = 1;
  std::string source;
};
// OMP_NUM_THREADS when set (ConfigError unless a whole number 1-1024; of a nested list "8,4",
// the first); else the machine's cores shared among the job's processes on it: as the launcher
// says (local_process_count), else as counted at the rendezvous store (`ranks_on_host`: a
// hand-made torchrun-style environment without LOCAL_WORLD_SIZE), else this process alone; and
// no more than the CPUs the launcher confined it to (cluster.pin_cores, srun's
// --cpus-per-task, a container's cpuset). The machine's cores are first cut to its cgroup's
// CPU limit, rounded up (util::cgroup_cpu_limit: docker --cpus, Kubernetes limits.cpu).
ComputeThreads default_compute_threads(std::optional<int> ranks_on_host = std::nullopt);

}  // namespace aiacc::trainer
