// AutoTuner: picks the fastest of a few communication settings (bucket size, stream count)
// during the first steps of a job, from measured step times. Every rank walks the candidates in
// the same order for the same number of steps (so all ranks change settings at the same step);
// rank 0's measurements decide, its choice is broadcast, and the choice is logged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ring/communicator.h"

namespace aiacc::ring {

// How a candidate's measured step times become its score.
enum class TuningScore {
  kMedian,  // robust to a rare slow step (a trainer's steps include compute, and its hiccups)
  kMean,    // what a run of many back-to-back steps will average: counts tail delays (queueing,
            // retransmits) that grow with the stream count
};

struct TuningCandidate {
  std::int64_t bucket_bytes = 0;
  int streams = 1;
  std::string str() const;
};

class AutoTuner {
 public:
  // Tries each candidate for warmup_steps (not measured: connections and caches settle) plus
  // measured_steps steps; the score of a candidate is the median (or mean) of its measured step
  // times. The choice: the fewest streams among the candidates within 5% of the best score (the
  // fastest of those if they tie on streams).
  AutoTuner(std::shared_ptr<Communicator> comm, std::vector<TuningCandidate> candidates, int warmup_steps = 1,
            int measured_steps = 3, TuningScore score = TuningScore::kMedian);

  // The setting to use for the next step.
  const TuningCandidate& current() const { return candidates_[static_cast<std::size_t>(current_)]; }
  bool done() const { return done_; }
  // The candidates in the order they are tried.
  const std::vector<TuningCandidate>& candidates() const { return candidates_; }
  // Steps tuning takes in all (0 for a single candidate: it is chosen at once).
  std::int64_t steps() const {
    return candidates_.size() > 1 ? static_cast<std::int64_t>(candidates_.size()) * (warmup_steps_ + measured_steps_)
                                  : 0;
  }

  // Records this rank's time for the step just run with current(). Collective once tuning ends
  // (the step that completes the last candidate broadcasts rank 0's choice). Returns true if
  // current() changed.
  bool record(double step_seconds);

  // Score (median or mean step time) per candidate (rank 0's after tuning: what the choice was based on).
  const std::vector<double>& scores() const { return scores_; }

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<TuningCandidate> candidates_;
  int warmup_steps_, measured_steps_;
  TuningScore score_;
  int current_ = 0, steps_in_candidate_ = 0;
  bool done_ = false;
  std::vector<double> times_;
  std::vector<double> scores_;
};

// Weights for multi-stream splits from measured per-stream times, agreed on by all ranks:
// every `every_runs` recorded runs, the ranks sum their per-stream seconds (a small allreduce,
// bitwise equal everywhere) and move the communicator's weights toward equal finishing times,
// so a stream capped by the network gets less of each buffer and a fast one more.
class StreamBalancer {
 public:
  StreamBalancer(std::shared_ptr<Communicator> comm, int every_runs = 8);
  // Adds one run's per-stream seconds (Allreduce::stream_timings()); a run on stream 0 alone
  // (empty timings) is not counted. Collective every `every_runs` counted runs (all ranks
  // record the same runs).
  void record(const StreamTimings& run);
  // Drops the runs recorded since the last update: call it when the set of active streams
  // changes (a stream that was off would otherwise look fast).
  void reset();
  // Updates every `every_runs` counted runs from now on (a tuner rebalances after every run).
  void set_every_runs(int every_runs);

 private:
  std::shared_ptr<Communicator> comm_;
  int every_runs_;
  int runs_ = 0;
  std::vector<double> seconds_;
};

}  // namespace aiacc::ring
