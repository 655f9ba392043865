// HotRowCache: a hash map from id to slot and an intrusive LRU list over the slots in use.
#include "core/embedding/hot_row_cache.h"

#include <fmt/format.h>

#include <limits>

#include "core/check.h"
#include "core/error.h"

namespace aiacc::embedding {

HotRowCache::HotRowCache(std::int64_t slots, std::int64_t max_staleness) : max_staleness_(max_staleness) {
  if (slots < 1 || slots > std::numeric_limits<std::int32_t>::max() || max_staleness < 0) {
    throw ConfigError(fmt::format("hot row cache: {} slots (1 to 2^31-1) and a staleness bound of {} steps "
                                  "(at least 0)", slots, max_staleness));
  }
  const auto n = static_cast<std::size_t>(slots);
  slot_id_.assign(n, 0);
  fetched_step_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  slot_of_id_.reserve(n);
}

void HotRowCache::unlink(std::int32_t slot) {
  const std::int32_t p = prev_[slot], n = next_[slot];
  (p >= 0 ? next_[p] : head_) = n;
  (n >= 0 ? prev_[n] : tail_) = p;
  prev_[slot] = next_[slot] = -1;
}

void HotRowCache::push_front(std::int32_t slot) {
  prev_[slot] = -1;
  next_[slot] = head_;
  if (head_ >= 0) prev_[head_] = slot;
  head_ = slot;
  if (tail_ < 0) tail_ = slot;
}

void HotRowCache::touch(std::int32_t slot) {
  if (slot == head_) return;
  unlink(slot);
  push_front(slot);
}

RowCachePlan HotRowCache::plan(std::span<const std::int64_t> unique_ids, std::int64_t step) {
  AIACC_CHECK(step >= last_step_, "hot row cache: step {} after step {}", step, last_step_);
  if (static_cast<std::int64_t>(unique_ids.size()) > slots()) {
    throw ConfigError(fmt::format("hot row cache: a batch of {} unique rows does not fit its {} slots "
                                  "(raise the cache's capacity above the largest batch)",
                                  unique_ids.size(), slots()));
  }
  last_step_ = step;
  RowCachePlan plan;
  plan.slot_of.resize(unique_ids.size());
  for (std::size_t i = 0; i < unique_ids.size(); ++i) {
    const std::int64_t id = unique_ids[i];
    auto it = slot_of_id_.find(id);
    std::int32_t slot;
    if (it != slot_of_id_.end()) {
      slot = it->second;
      if (step - fetched_step_[slot] <= max_staleness_) {
        ++stats_.hits;
      } else {
        ++stats_.refreshes;
        fetched_step_[slot] = step;
        plan.fetch_ids.push_back(id);
        plan.fetch_slots.push_back(slot);
      }
      touch(slot);
    } else {
      ++stats_.misses;
      if (free_slots_ < slots()) {
        slot = free_slots_++;
      } else {
        // The least recently used row: never one of this batch, whose rows are at the front
        // and number fewer than the slots.
        slot = tail_;
        unlink(slot);
        slot_of_id_.erase(slot_id_[slot]);
        ++stats_.evictions;
      }
      slot_of_id_.emplace(id, slot);
      slot_id_[slot] = id;
      fetched_step_[slot] = step;
      push_front(slot);
      plan.fetch_ids.push_back(id);
      plan.fetch_slots.push_back(slot);
    }
    plan.slot_of[i] = slot;
  }
  return plan;
}

}  // namespace aiacc::embedding
