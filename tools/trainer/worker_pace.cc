#include "tools/trainer/worker_pace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::trainer {

double WorkerPace::spread() const {
  const double fast = ms_per_step[static_cast<std::size_t>(fastest)];
  return fast > 0 ? ms_per_step[static_cast<std::size_t>(slowest)] / fast - 1.0 : 0.0;
}

std::string WorkerPace::describe() const {
  std::vector<double> sorted = ms_per_step;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  return fmt::format("compute per step (training time less communication wait): worker {} {:.3f} ms, the slowest, "
                     "{:.0f}% above worker {}'s {:.3f} ms{}",
                     slowest, ms_per_step[static_cast<std::size_t>(slowest)], 100 * spread(), fastest,
                     ms_per_step[static_cast<std::size_t>(fastest)],
                     n > 2 ? fmt::format(" (median {:.3f} ms)", median) : std::string());
}

std::optional<WorkerPace> worker_pace(std::vector<double> ms_per_step) {
  if (ms_per_step.size() < 2) return std::nullopt;
  WorkerPace pace;
  pace.ms_per_step = std::move(ms_per_step);
  const auto [low, high] = std::minmax_element(pace.ms_per_step.begin(), pace.ms_per_step.end());
  pace.fastest = static_cast<int>(low - pace.ms_per_step.begin());
  pace.slowest = static_cast<int>(high - pace.ms_per_step.begin());
  return pace;
}

long slow_worker_micros(int rank) {
  const char* spec = std::getenv("AIACC_TEST_SLOW_WORKER");
  if (spec == nullptr) return 0;
  int at_rank = -1;
  long micros = -1;
  char extra = 0;
  if (std::sscanf(spec, "%d:%ld%c", &at_rank, &micros, &extra) != 2 || micros < 0) {
    throw ConfigError(fmt::format("AIACC_TEST_SLOW_WORKER='{}': expected RANK:MICROSECONDS", spec));
  }
  return at_rank == rank ? micros : 0;
}

}  // namespace aiacc::trainer
