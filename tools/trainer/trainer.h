// The training loop of one process: data loader -> model forward/backward -> optimiser step,
// with a progress line, metrics as JSON lines in the run folder and evaluation per epoch.
// Not thread-safe; one Trainer per process.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "tools/trainer/job_options.h"
#include "tools/trainer/process_group.h"

namespace aiacc::trainer {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  double auc = 0;        // binary tasks (NaN otherwise)
  double log_loss = 0;   // binary tasks (NaN otherwise)
  std::int64_t examples = 0;
};

// Test and tooling controls of one run() (not part of the job config).
struct RunControl {
  // Stop after this global step as if the process were killed right after it (0: never).
  std::int64_t stop_after_step = 0;
};

struct TrainResult {
  std::int64_t steps = 0;              // the global step reached
  std::int64_t resumed_from_step = -1; // the checkpoint's step when resumed, else -1
  double last_train_loss = 0;        // mean loss over the last logging interval
  double first_train_loss = 0;       // mean loss over the first logging interval
  // Throughput of all workers together after the run's first step (its start-up: the loader's
  // first batch, the collectives' first connections), or over all steps when there is no other.
  double samples_per_second = 0;
  double samples_per_second_all_steps = 0;  // start-up included
  std::int64_t warmup_steps = 0;            // steps left out of samples_per_second (0 or 1)
  double warmup_seconds = 0;                // their time
  double seconds = 0;                       // training time of the run, start-up included
  double comm_wait_share = 0;         // distributed: share of step time waiting on communication
  // Distributed: share of the gradient all-reduce's time the training thread did not wait for
  // (it ran behind backward, and where tables are on parameter servers behind the row pushes
  // and the next batch's prefetch too).
  double allreduce_hidden_share = 0;
  std::optional<EvalResult> last_eval;
  // job.precision: fp16: the loss scale at the end and the steps skipped for overflow.
  double loss_scale = 1;
  std::int64_t overflow_steps = 0;
  // train.clip_grad_norm: the steps of this run whose dense gradients were scaled down, and the
  // global norm (before clipping) of the last step.
  std::int64_t clipped_steps = 0;
  double last_grad_norm = 0;
  // train.checkpoint.on_signal: the stop signal the job stopped on (its checkpoint taken), or 0.
  int stopped_by_signal = 0;
  // train.early_stopping stopped this run (or the run it resumed had stopped so).
  bool stopped_early = false;
};

class Trainer {
 public:
  // Builds datasets, model and optimiser. Throws ConfigError or DataError. With `group` (a
  // worker of a distributed job) parameters are placed per cluster.placement: dense gradients
  // all-reduced by a GradientFuser during backward, sparse tables replicated or on the
  // parameter servers; collective with the other workers from here on.
  explicit Trainer(const JobOptions& options, std::shared_ptr<ProcessGroup> group = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Prints the plan: data sizes, steps, every parameter (name, shape, elements, kind) and how
  // it is synchronised. Built without a process group for a distributed config (a dry run),
  // it describes the job's workers: their steps (the schedules are checked against them) and
  // each tensor's placement as far as the rules decide it before the job starts.
  void describe(std::ostream& out) const;

  // Trains for the configured epochs / steps, resuming from the newest complete checkpoint when
  // train.checkpoint.resume is auto. Throws on failure.
  TrainResult run(const RunControl& control = {});

  // The model's parameters and buffers by name (what a checkpoint's model file holds).
  std::vector<std::pair<std::string, Tensor>> model_tensors() const;
  // The model being trained (for tools and tests that run it directly).
  models::Model& model();

  // Every embedding table's rows and optimiser state (what a checkpoint's embeddings file holds).
  std::vector<std::pair<std::string, Tensor>> embedding_rows() const;

  // Evaluates the current model on the whole test split (collective with the other workers:
  // each evaluates its shard, metrics are merged exactly).
  EvalResult evaluate();

  // Loads the checkpoint in `directory` (a step-<N> folder of a run) and evaluates it on the
  // test split, distributed like training; logs the metrics and, on worker 0, appends an
  // "eval_checkpoint" record to the metrics.jsonl of the checkpoint's run (<run> of
  // <run>/checkpoints/step-N; this job's run folder for a checkpoint kept elsewhere) and logs
  // where. Throws DataError naming the folder when it is not a complete checkpoint of this model.
  EvalResult evaluate_checkpoint(const std::string& directory);

 private:
  void describe_distributed(std::ostream& out) const;
  struct State;
  std::unique_ptr<State> state_;
};

// Applies job.flush_denormals to the calling thread and OpenMP's (threads started later inherit
// it); warns where the CPU has no flush-to-zero mode. The Trainer calls it; aiacc-train calls it
// first, before the process group starts its stream threads, and in server processes.
void apply_float_mode(const JobOptions& options);

}  // namespace aiacc::trainer
