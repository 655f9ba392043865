// SyncAggregator (merge of a step's pushes) and StalenessClock (bounded staleness).
#include "ps/consistency.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/kernels/dedup.h"

namespace aiacc::ps {

SyncAggregator::SyncAggregator(int num_workers, bool average, int dim)
    : num_workers_(num_workers), average_(average), dim_(dim) {}

void SyncAggregator::add(std::uint64_t step, Contribution c) {
  if (c.worker < 0 || c.worker >= num_workers_) {
    throw CommError(fmt::format("synchronous push from worker {} (table has {} workers)", c.worker,
                                num_workers_));
  }
  if (any_applied_ && step <= applied_through_) {
    throw CommError(fmt::format("synchronous push of worker {} for step {}, but step {} was already "
                                "applied (the worker is out of lock-step)",
                                c.worker, step, applied_through_));
  }
  auto& contributions = steps_[step];
  for (const Contribution& other : contributions) {
    if (other.worker == c.worker) {
      throw CommError(fmt::format("worker {} pushed twice for step {} (seq {} and {}); a "
                                  "synchronous table takes one push per worker and step",
                                  c.worker, step, other.seq, c.seq));
    }
  }
  contributions.push_back(std::move(c));
  first_arrival_.try_emplace(step, std::chrono::steady_clock::now());
}

double SyncAggregator::oldest_wait_seconds() const {
  if (steps_.empty()) return 0.0;
  const auto it = first_arrival_.find(steps_.begin()->first);
  if (it == first_arrival_.end()) return 0.0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
}

bool SyncAggregator::pending(int worker, std::uint64_t seq) const {
  for (const auto& [step, contributions] : steps_) {
    for (const Contribution& c : contributions) {
      if (c.worker == worker && c.seq == seq) return true;
    }
  }
  return false;
}

bool SyncAggregator::pop_ready(ReadyStep& out) {
  auto it = steps_.begin();
  if (it == steps_.end() || static_cast<int>(it->second.size()) < num_workers_) return false;
  out.step = it->first;
  out.contributions = std::move(it->second);
  first_arrival_.erase(it->first);
  steps_.erase(it);
  std::sort(out.contributions.begin(), out.contributions.end(),
            [](const Contribution& a, const Contribution& b) { return a.worker < b.worker; });
  // Concatenate ids in worker order, de-duplicate, and add each gradient row to its id's row.
  std::vector<std::int64_t> all;
  for (const Contribution& c : out.contributions) all.insert(all.end(), c.ids.begin(), c.ids.end());
  kernels::DedupResult dedup = kernels::deduplicate_ids(all);
  out.ids = std::move(dedup.unique_ids);
  const auto d = static_cast<std::size_t>(dim_);
  out.grads.assign(out.ids.size() * d, 0.0f);
  std::size_t p = 0;
  for (const Contribution& c : out.contributions) {
    for (std::size_t i = 0; i < c.ids.size(); ++i, ++p) {
      float* row = out.grads.data() + static_cast<std::size_t>(dedup.inverse[p]) * d;
      const float* g = c.grads + i * d;
      for (std::size_t j = 0; j < d; ++j) row[j] += g[j];
    }
  }
  if (average_ && num_workers_ > 1) {
    const auto w = static_cast<float>(num_workers_);
    for (float& g : out.grads) g /= w;
  }
  out.lr = out.contributions.front().lr;
  any_applied_ = true;
  applied_through_ = out.step;
  return true;
}

std::string SyncAggregator::describe_waiting() const {
  if (steps_.empty()) return {};
  const auto& [step, contributions] = *steps_.begin();
  std::vector<int> missing;
  for (int w = 0; w < num_workers_; ++w) {
    if (std::none_of(contributions.begin(), contributions.end(),
                     [w](const Contribution& c) { return c.worker == w; })) {
      missing.push_back(w);
    }
  }
  return fmt::format("step {}: waiting for workers {}", step, fmt::join(missing, ", "));
}

std::vector<Contribution> SyncAggregator::take_waiting() {
  std::vector<Contribution> out;
  for (auto& [step, contributions] : steps_) {
    for (auto& c : contributions) out.push_back(std::move(c));
  }
  steps_.clear();
  first_arrival_.clear();
  return out;
}

StalenessClock::StalenessClock(int num_workers, int staleness)
    : staleness_(staleness), clock_(static_cast<std::size_t>(num_workers), 0) {}

void StalenessClock::advance(int worker, std::uint64_t step) {
  if (worker < 0 || worker >= static_cast<int>(clock_.size())) {
    throw CommError(fmt::format("push from worker {} (table has {} workers)", worker, clock_.size()));
  }
  auto& clock = clock_[static_cast<std::size_t>(worker)];
  clock = std::max(clock, step + 1);
}

void StalenessClock::completed(int worker, std::uint64_t steps) {
  if (worker < 0 || worker >= static_cast<int>(clock_.size())) {
    throw CommError(fmt::format("pull from worker {} (table has {} workers)", worker, clock_.size()));
  }
  auto& clock = clock_[static_cast<std::size_t>(worker)];
  clock = std::max(clock, steps);
}

std::uint64_t StalenessClock::min_clock() const {
  return *std::min_element(clock_.begin(), clock_.end());
}

int StalenessClock::slowest_worker() const {
  return static_cast<int>(std::min_element(clock_.begin(), clock_.end()) - clock_.begin());
}

std::int64_t StalenessClock::lag(std::uint64_t step) const {
  const std::uint64_t slowest = min_clock();
  return step > slowest ? static_cast<std::int64_t>(step - slowest) : 0;
}

}  // namespace aiacc::ps
