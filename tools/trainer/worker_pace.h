// Each worker's pace at the end of a run: its compute per step (its training time less the time
// it waited on communication), gathered from every worker. In synchronous training every step
// waits for the slowest worker, so a slower core, host or data shard costs every worker that
// much: the summary names the slowest worker where one is clearly behind the fastest.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace aiacc::trainer {

struct WorkerPace {
  std::vector<double> ms_per_step;  // by worker
  int slowest = 0;
  int fastest = 0;
  // The slowest worker's compute per step over the fastest's, less 1 (0.18: 18% slower).
  double spread() const;
  // "compute per step: worker 1 0.84 ms, the slowest, 18% above worker 0's 0.71 ms (median ...)".
  std::string describe() const;
};

// The pace of `ms_per_step` (one entry per worker, as gathered); nullopt for fewer than 2.
std::optional<WorkerPace> worker_pace(std::vector<double> ms_per_step);

// Spreads at or above this are reported as a straggler (a warning naming the slowest worker).
inline constexpr double kStragglerSpread = 0.10;

// Test hook: AIACC_TEST_SLOW_WORKER=RANK:MICROSECONDS makes worker RANK sleep that long in every
// step, before its gradients are all-reduced (a slow core or host as the others see it). 0 for
// other ranks or when unset; ConfigError naming the variable when malformed.
long slow_worker_micros(int rank);

}  // namespace aiacc::trainer
