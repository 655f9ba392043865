// HotRowCache: which parameter-server rows a worker keeps in a fixed number of slots of its own
// (on a GPU: a device table of slots x dim, core/cuda/kernels/row_cache.h), and when a kept row
// is too old to use. Device-independent: it plans, the caller moves the rows.
//
// Staleness bound: a row fetched at step f serves the batches of steps up to f + max_staleness;
// later it is fetched again. The parameter servers apply every worker's pushes, so a cached copy
// misses the updates made since f: the bound must not exceed what the table's consistency
// allows (sync: 0, the cache then only saves the copies within one step; bounded: at most its
// staleness; async: any). Within the bound a hot row (the few ids of a CTR feature most batches
// use) is pulled once per max_staleness + 1 steps instead of every step.
//
// Eviction: least recently used. A batch's rows are all kept during its step (they are the most
// recently used), so a batch needs at most `slots` unique rows.
// Not thread-safe (one per worker's table and training thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace aiacc::embedding {

struct HotRowCacheStats {
  std::int64_t hits = 0;       // rows served from a slot
  std::int64_t misses = 0;     // rows not cached: fetched into a free or evicted slot
  std::int64_t refreshes = 0;  // cached rows past the staleness bound: fetched again in place
  std::int64_t evictions = 0;  // rows dropped to make room
};

// What a batch needs: the slot of each requested row, and the rows to fetch into slots first.
struct RowCachePlan {
  std::vector<std::int32_t> slot_of;       // [U]: slot of unique_ids[i]
  std::vector<std::int64_t> fetch_ids;     // rows to pull from the servers ...
  std::vector<std::int32_t> fetch_slots;   // ... and the slots they go to
};

class HotRowCache {
 public:
  // `slots` >= 1; `max_staleness` >= 0 steps. ConfigError otherwise.
  HotRowCache(std::int64_t slots, std::int64_t max_staleness);

  // Plans the batch of `step` (non-decreasing from call to call) over its unique ids. Throws
  // ConfigError when the batch has more unique rows than the cache has slots, InternalError
  // when steps go backwards. The plan's fetches must be carried out before its slots are read.
  RowCachePlan plan(std::span<const std::int64_t> unique_ids, std::int64_t step);

  std::int64_t slots() const { return static_cast<std::int64_t>(slot_id_.size()); }
  std::int64_t size() const { return size_; }
  const HotRowCacheStats& stats() const { return stats_; }

 private:
  void touch(std::int32_t slot);   // moves a slot to the most-recently-used end
  void unlink(std::int32_t slot);
  void push_front(std::int32_t slot);

  // The id -> slot index: open addressing with linear probing at load <= 1/2, deletion by
  // backward shift (no tombstones). A node-based map made plan() a trainer's largest single
  // cost (7% of a Wide&Deep worker's samples): one allocation and a cache miss per entry.
  struct IndexEntry {
    std::int64_t id = 0;
    std::int32_t slot = -1;  // -1: empty
  };
  std::size_t home(std::int64_t id) const;
  std::int32_t find_slot(std::int64_t id) const;  // -1 when absent
  void index_insert(std::int64_t id, std::int32_t slot);
  void index_erase(std::int64_t id);

  std::int64_t max_staleness_;
  std::int64_t last_step_ = -1;
  std::vector<IndexEntry> index_;  // a power of two >= 2 x slots
  std::int64_t size_ = 0;           // ids held
  std::vector<std::int64_t> slot_id_;       // id held by each slot (meaningful when used)
  std::vector<std::int64_t> fetched_step_;  // step each slot's row was fetched
  std::vector<std::int32_t> prev_, next_;   // LRU list over used slots: head = most recent
  std::int32_t head_ = -1, tail_ = -1;
  std::int32_t free_slots_ = 0;             // slots [0, free_slots_) have been handed out
  HotRowCacheStats stats_;
};

}  // namespace aiacc::embedding
