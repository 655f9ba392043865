// GradientFuser: overlaps dense-gradient allreduce with the backward pass (AIACC's gradient
// fusion). The parameters' gradients are rebound, at construction, to views of one flat buffer
// laid out in ready order, so backward writes them straight into the buckets; a bucket is
// all-reduced in place by a communication thread as soon as its last gradient is final (the
// parameter's grad-ready hook), while backward continues; finish_step() waits for the rest.
//
// Buckets are always launched in plan order (a bucket that completes early waits for the ones
// before it), so every rank issues the same collectives in the same order even if hooks fire in
// a different order. By default the last bucket runs on the thread that calls finish_step()
// (FusionOptions::last_bucket_on_caller). With auto-tuning on, the bucket size and stream count
// are chosen during the first steps (AutoTuner) and stream weights rebalanced toward equal
// finishing times (StreamBalancer).
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/parameter.h"
#include "ring/allreduce.h"
#include "ring/auto_tuner.h"
#include "ring/bucket_plan.h"
#include "ring/communicator.h"
#include "ring/gradient_sync.h"

namespace aiacc::ring {

struct FusionOptions {
  // Target bucket size. Small buckets start communicating earlier in backward; large ones
  // amortise per-collective latency. 4 MiB suits the CPU ring on loopback/LAN; auto-tuning
  // (below) picks per job.
  std::int64_t bucket_bytes = 4 << 20;
  AllreduceSpec spec{ReduceOp::kAverage, WireType::kNative, 1 << 20};
  AllreduceTuning tuning;
  // Try these bucket sizes x stream counts (1 .. the communicator's streams, powers of two)
  // during the first steps and keep the fastest. Empty: no tuning.
  std::vector<std::int64_t> tune_bucket_bytes;
  bool tune_streams = false;
  int tune_warmup_steps = 1;
  int tune_measured_steps = 3;
  // Rebalance stream weights from measured stream times every this many ring runs (0: never).
  int rebalance_every_runs = 16;
  // Run the last bucket on the thread that calls finish_step(), not the communication thread.
  // It completes at the end of backward; when the caller goes straight to finish_step(), this
  // spares two thread hand-offs per step (and a one-bucket plan never wakes the thread). Off
  // when the caller has other work to overlap with it (waiting for parameter-server pushes).
  bool last_bucket_on_caller = true;
};

class GradientFuser : public GradientSync {
 public:
  // `parameters`: the dense parameters in gradient-ready order (reverse of forward), f32,
  // alive and at fixed addresses for the fuser's lifetime (it registers grad-ready hooks that
  // point back to it). Their gradients become views of the fuser's flat buffer (values kept;
  // the storage is shared, so it outlives the fuser). Collective: verifies the bucket plan
  // across ranks (ConfigError on a mismatch) and starts the communication thread.
  GradientFuser(std::shared_ptr<Communicator> comm, std::vector<Parameter*> parameters, FusionOptions options);
  ~GradientFuser() override;  // stops the communication thread (after abandoning an unfinished step)
  GradientFuser(const GradientFuser&) = delete;
  GradientFuser& operator=(const GradientFuser&) = delete;

  // Starts a step: no gradient is ready yet. Call before backward.
  void begin_step() override;
  // Blocks until every bucket is reduced (in place: the parameters' gradients are its views).
  // Parameters whose hook did not fire this step (unused in the graph) contribute their current
  // gradient. Rethrows a communication failure (CommError/TimeoutError naming the peer).
  void finish_step() override;

  const BucketPlan& plan() const { return *plan_; }
  // Seconds finish_step() waited for communication in the last step (the part not overlapped).
  double last_exposed_seconds() const override { return exposed_seconds_; }
  // Seconds spent in the last step's collectives, on either thread (overlapped or not):
  // 1 - exposed / communication is the share hidden behind backward.
  double last_communication_seconds() const override { return last_communication_seconds_; }
  const AutoTuner* tuner() const { return tuner_ ? &*tuner_ : nullptr; }

 private:
  void on_ready(int tensor);
  void build(std::int64_t bucket_bytes);
  void communicate();  // the communication thread: the first thread_buckets() buckets
  void run_bucket(std::size_t bucket);  // all-reduces it (on either thread; throws on failure)
  // Buckets the communication thread runs this step (all, or all but the last). Under mutex_.
  int thread_buckets() const;

  std::shared_ptr<Communicator> comm_;
  std::vector<Parameter*> parameters_;
  FusionOptions options_;
  Tensor flat_;  // every parameter's gradient is a view of it (ready order)
  std::optional<BucketPlan> plan_;
  std::vector<std::unique_ptr<Allreduce>> allreduces_;  // one per bucket
  std::optional<AutoTuner> tuner_;
  std::optional<StreamBalancer> balancer_;

  std::mutex mutex_;
  std::condition_variable work_;     // to the communication thread: a step or a bucket is ready
  std::condition_variable changed_;  // to finish_step(): a bucket is done, or an error
  std::vector<char> tensor_ready_;
  std::vector<int> bucket_pending_;  // tensors not yet ready, per bucket
  int buckets_done_ = 0;
  bool in_step_ = false, stopping_ = false;
  std::uint64_t step_ = 0;
  std::exception_ptr error_;
  double exposed_seconds_ = 0;
  double communication_seconds_ = 0;       // this step so far (guarded by mutex_)
  double last_communication_seconds_ = 0;
  net::Clock::time_point step_start_;
  std::thread thread_;
};

}  // namespace aiacc::ring
