#include "ring/auto_tuner.h"

#include <algorithm>

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
                     int measured_steps)
    : comm_(std::move(comm)),
      candidates_(std::move(candidates)),
      warmup_steps_(warmup_steps),
      measured_steps_(std::max(1, measured_steps)),
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
  std::nth_element(times_.begin(), times_.begin() + static_cast<std::ptrdiff_t>(times_.size() / 2), times_.end());
  scores_[static_cast<std::size_t>(current_)] = times_[times_.size() / 2];
  times_.clear();
  steps_in_candidate_ = 0;
  if (current_ + 1 < static_cast<int>(candidates_.size())) {
    ++current_;
    return true;
  }
  // Rank 0 decides; everyone adopts its choice (local timings differ between ranks).
  std::int64_t best = std::min_element(scores_.begin(), scores_.end()) - scores_.begin();
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
  log::get("ring")->info("auto-tuning chose {} (median step times on rank 0: {})", current().str(), table);
  return current_ != previous;
}

StreamBalancer::StreamBalancer(std::shared_ptr<Communicator> comm, int every_runs)
    : comm_(std::move(comm)),
      every_runs_(std::max(1, every_runs)),
      bytes_(static_cast<std::size_t>(comm_->streams()), 0.0),
      seconds_(static_cast<std::size_t>(comm_->streams()), 0.0) {}

void StreamBalancer::record(const std::vector<std::int64_t>& bytes, const std::vector<double>& seconds) {
  for (std::size_t s = 0; s < bytes_.size() && s < bytes.size(); ++s) {
    bytes_[s] += static_cast<double>(bytes[s]);
    seconds_[s] += seconds[s];
  }
  if (++runs_ < every_runs_) return;
  runs_ = 0;
  // Rates per stream (0 for a stream that carried nothing: it keeps a small share so it is
  // measured again), summed over ranks: identical on every rank after the allreduce.
  std::vector<double> rates(bytes_.size());
  for (std::size_t s = 0; s < rates.size(); ++s) rates[s] = seconds_[s] > 0 ? bytes_[s] / seconds_[s] : 0.0;
  RecursiveDoublingAllreduce(comm_, Buffer{rates.data(), static_cast<std::int64_t>(rates.size()), DType::f64},
                             ReduceOp::kSum).run();
  double top = *std::max_element(rates.begin(), rates.end());
  if (top <= 0) return;
  const auto& old = comm_->stream_weights();
  std::vector<double> weights(rates.size());
  for (std::size_t s = 0; s < rates.size(); ++s) {
    // Only streams in use are rebalanced (a zero weight means the stream is switched off).
    weights[s] = old[s] > 0 ? std::max(rates[s], 0.05 * top) : 0.0;
  }
  comm_->set_stream_weights(weights);
  std::fill(bytes_.begin(), bytes_.end(), 0.0);
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
}

}  // namespace aiacc::ring
