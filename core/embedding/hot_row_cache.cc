// HotRowCache: an open-addressing index from id to slot and an intrusive LRU list over the
// slots in use.
#include "core/embedding/hot_row_cache.h"

#include <fmt/format.h>

#include <bit>
#include <limits>

#include "core/check.h"
#include "core/error.h"
#include "core/util/random.h"

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
  index_.resize(std::bit_ceil(2 * n));
}

std::size_t HotRowCache::home(std::int64_t id) const {
  return static_cast<std::size_t>(mix64(static_cast<std::uint64_t>(id))) & (index_.size() - 1);
}

std::int32_t HotRowCache::find_slot(std::int64_t id) const {
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = home(id);; i = (i + 1) & mask) {
    const IndexEntry& e = index_[i];
    if (e.slot < 0) return -1;
    if (e.id == id) return e.slot;
  }
}

void HotRowCache::index_insert(std::int64_t id, std::int32_t slot) {
  const std::size_t mask = index_.size() - 1;
  std::size_t i = home(id);
  while (index_[i].slot >= 0) i = (i + 1) & mask;
  index_[i] = {id, slot};
  ++size_;
}

void HotRowCache::index_erase(std::int64_t id) {
  const std::size_t mask = index_.size() - 1;
  std::size_t hole = home(id);
  while (index_[hole].id != id || index_[hole].slot < 0) hole = (hole + 1) & mask;
  // Backward shift: move later entries of the run into the hole when their home allows it,
  // so every probe still reaches its entry before an empty one.
  for (std::size_t next = (hole + 1) & mask; index_[next].slot >= 0; next = (next + 1) & mask) {
    const std::size_t want = home(index_[next].id);
    // `next` may fill the hole when its home is not in (hole, next] (cyclically).
    const bool home_after_hole = ((want - hole - 1) & mask) < ((next - hole) & mask);
    if (!home_after_hole) {
      index_[hole] = index_[next];
      hole = next;
    }
  }
  index_[hole] = IndexEntry{};
  --size_;
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
    std::int32_t slot = find_slot(id);
    if (slot >= 0) {
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
        index_erase(slot_id_[slot]);
        ++stats_.evictions;
      }
      index_insert(id, slot);
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
