#include "ring/auto_tuner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/check.h"
#include "core/log.h"
#include "ring/broadcast.h"
#include "ring/recursive_doubling_allreduce.h"

namespace aiacc::ring {

std::string TuningCandidate::str() const {
  return fmt::format("bucket {} KiB, {} stream{}", bucket_bytes / 1024, streams, streams == 1 ? "" : "s");
}

AutoTuner::AutoTuner(std::shared_ptr<Communicator> comm, std::vector<TuningCandidate> candidates, int warmup_steps,
                     int measured_steps, TuningScore score)
    : comm_(std::move(comm)),
      candidates_(std::move(candidates)),
      warmup_steps_(warmup_steps),
      measured_steps_(std::max(1, measured_steps)),
      score_(score),
      scores_(candidates_.size(), 0.0) {
  AIACC_CHECK(!candidates_.empty(), "auto-tuner needs candidates");
  for (const auto& c : candidates_) {
    AIACC_CHECK(c.streams >= 1 && c.streams <= comm_->streams(), "candidate with {} streams; the communicator has {}",
                c.streams, comm_->streams());
  }
  done_ = candidates_.size() == 1;
}

bool AutoTuner::record(double step_seconds) {
  if (done_) return false;
  if (++steps_in_candidate_ > warmup_steps_) times_.push_back(step_seconds);
  if (steps_in_candidate_ < warmup_steps_ + measured_steps_) return false;
  double score = 0;
  if (score_ == TuningScore::kMean) {
    for (double t : times_) score += t;
    score /= static_cast<double>(times_.size());
  } else {
    std::nth_element(times_.begin(), times_.begin() + static_cast<std::ptrdiff_t>(times_.size() / 2), times_.end());
    score = times_[times_.size() / 2];
  }
  scores_[static_cast<std::size_t>(current_)] = score;
  times_.clear();
  steps_in_candidate_ = 0;
  if (current_ + 1 < static_cast<int>(candidates_.size())) {
    ++current_;
    return true;
  }
  // Rank 0 decides; everyone adopts its choice (local timings differ between ranks).
  // Within 5% of the fastest (closer than run-to-run noise) the fewest streams win: every
  // extra connection competes for the same link (on an emulated 4 Gbit/s link, 8 streams that
  // tuned 3% faster than 4 ran 64 MiB at 0.39 GB/s against 4's 0.47).
  const double fastest = *std::min_element(scores_.begin(), scores_.end());
  std::int64_t best = 0;
  for (std::size_t i = 0; i < scores_.size(); ++i) {
    const bool close = scores_[i] <= 1.05 * fastest;
    const auto& chosen = candidates_[static_cast<std::size_t>(best)];
    const bool best_close = scores_[static_cast<std::size_t>(best)] <= 1.05 * fastest;
    if (close && (!best_close || candidates_[i].streams < chosen.streams ||
                  (candidates_[i].streams == chosen.streams && scores_[i] < scores_[static_cast<std::size_t>(best)]))) {
      best = static_cast<std::int64_t>(i);
    }
  }
  std::vector<double> shared = scores_;
  shared.push_back(static_cast<double>(best));
  Broadcast(comm_, Buffer{shared.data(), static_cast<std::int64_t>(shared.size()), DType::f64}, 0).run();
  best = static_cast<std::int64_t>(shared.back());
  shared.pop_back();
  scores_ = shared;
  const int previous = current_;
  current_ = static_cast<int>(best);
  done_ = true;
  std::string table;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    table += fmt::format("{}{}: {:.2f} ms", i ? "; " : "", candidates_[i].str(), 1e3 * scores_[i]);
  }
  log::get("ring")->info("auto-tuning chose {} ({} step times on rank 0: {})", current().str(),
                          score_ == TuningScore::kMean ? "mean" : "median", table);
  return current_ != previous;
}

StreamBalancer::StreamBalancer(std::shared_ptr<Communicator> comm, int every_runs)
    : comm_(std::move(comm)),
      every_runs_(std::max(1, every_runs)),
      seconds_(static_cast<std::size_t>(comm_->streams()), 0.0) {}

void StreamBalancer::reset() {
  runs_ = 0;
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
}

void StreamBalancer::set_every_runs(int every_runs) { every_runs_ = std::max(1, every_runs); }

void StreamBalancer::record(const StreamTimings& run) {
  if (run.seconds.empty()) return;
  for (std::size_t s = 0; s < seconds_.size() && s < run.seconds.size(); ++s) seconds_[s] += run.seconds[s];
  if (++runs_ < every_runs_) return;
  runs_ = 0;
  // Each stream's time, summed over the runs and the ranks: identical on every rank after the
  // allreduce. Shares move toward equal finishing times: a stream that finished early gets
  // more, one that finished late less, by the square root of its time against the mean (damped
  // against noise), at most x2 or /2 per update, never below 5% of the largest. Shares
  // proportional to measured rates (bytes / time), the first rule here, are unstable once a
  // fixed latency is part of every stream's time: a stream given a little less measures a lower
  // rate and is given less again (4 streams capped at 1 Gbit/s each on an emulated 4 Gbit/s
  // link fell from 0.47 to 0.31 GB/s).
  std::vector<double> times = seconds_;
  RecursiveDoublingAllreduce(comm_, Buffer{times.data(), static_cast<std::int64_t>(times.size()), DType::f64},
                             ReduceOp::kSum).run();
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
  const auto& old = comm_->stream_weights();
  double mean = 0;
  int active = 0;
  for (std::size_t s = 0; s < times.size(); ++s) {
    if (old[s] <= 0) continue;  // a zero weight means the stream is switched off
    mean += times[s];
    ++active;
  }
  if (active < 2 || mean <= 0) return;
  mean /= active;
  std::vector<double> weights(times.size(), 0.0);
  for (std::size_t s = 0; s < times.size(); ++s) {
    if (old[s] <= 0) continue;
    const double factor = times[s] > 0 ? std::sqrt(mean / times[s]) : 2.0;
    weights[s] = old[s] * std::clamp(factor, 0.5, 2.0);
  }
  const double top = *std::max_element(weights.begin(), weights.end());
  for (std::size_t s = 0; s < weights.size(); ++s) {
    if (old[s] > 0) weights[s] = std::max(weights[s], 0.05 * top);
  }
  comm_->set_stream_weights(weights);
}

}  // namespace aiacc::ring
