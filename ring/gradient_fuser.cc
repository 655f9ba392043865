#include "ring/gradient_fuser.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "ring/detail/flat_gradients.h"

namespace aiacc::ring {

GradientFuser::GradientFuser(std::shared_ptr<Communicator> comm, std::vector<Parameter*> parameters,
                             FusionOptions options)
    : comm_(std::move(comm)), parameters_(std::move(parameters)), options_(std::move(options)) {
  const auto listing = detail::gradient_listing(parameters_);  // checks: dense f32 gradients
  tensor_ready_.assign(parameters_.size(), 0);

  std::vector<TuningCandidate> candidates;
  auto sizes = options_.tune_bucket_bytes.empty() ? std::vector<std::int64_t>{options_.bucket_bytes} : options_.tune_bucket_bytes;
  std::vector<int> streams{comm_->active_streams()};
  if (options_.tune_streams) {
    streams.clear();
    for (int k = 1; k <= comm_->streams(); k *= 2) streams.push_back(k);
    if (streams.back() != comm_->streams()) streams.push_back(comm_->streams());
  }
  for (int k : streams) {
    for (std::int64_t bytes : sizes) candidates.push_back({bytes, k});
  }
  tuner_.emplace(comm_, candidates, options_.tune_warmup_steps, options_.tune_measured_steps);
  if (options_.rebalance_every_runs > 0 && comm_->streams() > 1) {
    // While stream counts are tried, rebalance after every run: a count whose streams share a
    // capped path is then timed balanced, as it would run, not at equal shares.
    const bool tuning_streams = streams.size() > 1 && !tuner_->done();
    balancer_.emplace(comm_, tuning_streams ? 1 : options_.rebalance_every_runs);
  }

  // Every rank must derive the same layout; checked once with the tensors alone (bucket size
  // 0), since tuning may change the bucket boundaries later (identically on every rank).
  const BucketPlan layout(listing, 0);
  verify_plan(comm_, layout, "gradient fusion");
  // Offsets do not depend on the bucket size: the gradients are bound once, read back reduced.
  flat_ = detail::bind_flat_gradients(parameters_, layout, Device::cpu());
  if (comm_->streams() > 1 && tuner_->current().streams != comm_->active_streams()) {
    comm_->set_active_streams(tuner_->current().streams);
  }
  build(tuner_->current().bucket_bytes);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i]->add_grad_ready_hook([this, i](Parameter&) { on_ready(static_cast<int>(i)); });
  }
  thread_ = std::thread([this] { communicate(); });
}

GradientFuser::~GradientFuser() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  changed_.notify_all();
  thread_.join();
}

void GradientFuser::build(std::int64_t bucket_bytes) {
  plan_.emplace(detail::gradient_listing(parameters_), bucket_bytes);
  allreduces_.clear();
  for (const PlannedBucket& bucket : plan_->buckets()) {
    allreduces_.push_back(std::make_unique<Allreduce>(
        comm_, Buffer{flat_.data<float>() + bucket.offset, bucket.count, DType::f32}, options_.spec, options_.tuning));
  }
  bucket_pending_.assign(plan_->buckets().size(), 0);
  log::get("ring")->debug("gradient fusion plan: {}", plan_->summary());
}

void GradientFuser::begin_step() {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  AIACC_CHECK(!in_step_, "begin_step twice without finish_step");
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), 0);
  for (std::size_t b = 0; b < plan_->buckets().size(); ++b) {
    bucket_pending_[b] = static_cast<int>(plan_->buckets()[b].tensors.size());
  }
  buckets_done_ = 0;
  in_step_ = true;
  ++step_;
  step_start_ = net::Clock::now();
  if (thread_buckets() > 0) work_.notify_all();
}

int GradientFuser::thread_buckets() const {
  const int buckets = static_cast<int>(allreduces_.size());
  return options_.last_bucket_on_caller ? buckets - 1 : buckets;
}

void GradientFuser::on_ready(int tensor) {
  // The gradient already lies in its bucket (a view): backward wrote it there, and the
  // communication thread reads it only after the bucket's count reaches zero under the mutex.
  std::lock_guard lock(mutex_);
  if (!in_step_ || tensor_ready_[static_cast<std::size_t>(tensor)]) return;
  tensor_ready_[static_cast<std::size_t>(tensor)] = 1;
  const PlannedTensor& slot = plan_->tensors()[static_cast<std::size_t>(tensor)];
  if (--bucket_pending_[static_cast<std::size_t>(slot.bucket)] == 0 && slot.bucket < thread_buckets()) {
    work_.notify_all();
  }
}

void GradientFuser::run_bucket(std::size_t b) {
  Allreduce& allreduce = *allreduces_[b];
  trace::Span span("allreduce", fmt::format("bucket {}", b), {{"bytes", allreduce.buffer().bytes()}, {"step", step_}});
  const auto run_start = net::Clock::now();
  allreduce.run();
  const double run_seconds = net::seconds_since(run_start);
  {
    std::lock_guard lock(mutex_);
    communication_seconds_ += run_seconds;
  }
  // Outside the lock: every few runs the balancer agrees on new weights with a collective, and
  // the backward thread's hooks must not wait for it. Buckets run one at a time, so it needs none.
  if (balancer_) balancer_->record(allreduce.stream_timings());
}

void GradientFuser::communicate() {
  trace::set_thread_name("gradient all-reduce");
  std::uint64_t seen = 0;
  for (;;) {
    int buckets = 0;
    {
      std::unique_lock lock(mutex_);
      // With the last bucket on the caller, a plan of one bucket leaves this thread asleep.
      work_.wait(lock, [&] { return stopping_ || (in_step_ && step_ != seen && thread_buckets() > 0); });
      if (stopping_) return;
      seen = step_;
      // Read once: after the last bucket of a step, finish_step may rebuild the plan (tuning)
      // while this thread goes back to waiting.
      buckets = thread_buckets();
    }
    for (int b = 0; b < buckets; ++b) {
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || bucket_pending_[static_cast<std::size_t>(b)] == 0; });
        if (stopping_) return;
      }
      try {
        run_bucket(static_cast<std::size_t>(b));
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        changed_.notify_all();
        break;
      }
      std::lock_guard lock(mutex_);
      ++buckets_done_;
      changed_.notify_all();
    }
  }
}

void GradientFuser::finish_step() {
  const auto wait_start = net::Clock::now();
  // Gradients whose hook did not fire (parameters unused this step) join with their values.
  for (std::size_t t = 0; t < parameters_.size(); ++t) on_ready(static_cast<int>(t));
  const int buckets = static_cast<int>(allreduces_.size());
  const int on_thread = thread_buckets();
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return error_ || buckets_done_ >= on_thread; });
    if (error_) {
      in_step_ = false;
      std::rethrow_exception(error_);
    }
  }
  // The last bucket is complete only at the end of backward: run here, it spares two thread
  // hand-offs per step (the communication thread's wake-up and this thread's).
  try {
    if (on_thread < buckets) run_bucket(static_cast<std::size_t>(buckets - 1));
  } catch (...) {
    // Kept like a failure on the communication thread: every later step rethrows it.
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
    in_step_ = false;
    throw;
  }
  {
    std::lock_guard lock(mutex_);
    ++buckets_done_;
    in_step_ = false;
  }
  exposed_seconds_ = net::seconds_since(wait_start);
  {
    std::lock_guard lock(mutex_);
    last_communication_seconds_ = communication_seconds_;
    communication_seconds_ = 0;
  }
  const double step_seconds = net::seconds_since(step_start_);
  if (tuner_->done()) return;
  const TuningCandidate before = tuner_->current();
  if (tuner_->record(step_seconds)) {
    const TuningCandidate& now = tuner_->current();
    if (now.streams != before.streams) {
      comm_->set_active_streams(now.streams);
      if (balancer_) balancer_->reset();
    }
    if (now.bucket_bytes != before.bucket_bytes) build(now.bucket_bytes);
  }
  // Tuning is over: back to the configured period (set between steps, while no bucket runs).
  if (tuner_->done() && balancer_) balancer_->set_every_runs(options_.rebalance_every_runs);
}

}  // namespace aiacc::ring
