// ServerTable: one embedding table as a parameter-server shard holds it. Storage is a
// LocalEmbeddingStore (core/embedding: P hash partitions, each an open-addressing table over an
// arena of [value | optimiser state] rows with its own lock, processed in parallel), so rows
// are created on first touch from (id, seed) and a restarted shard recreates the same values.
// On top of it: optional admission (min_count requests before a row exists) and eviction
// (capacity_rows, least recently touched first), and the counters the shard logs and reports.
// Legend: U = ids in a request, D = dim, S = optimiser state floats per row.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/embedding/local_embedding_store.h"
#include "ps/protocol.h"

namespace aiacc::ps {

struct TableStats {
  std::string name;
  std::int64_t rows = 0;
  std::size_t memory_bytes = 0;  // store slots + arena (+ admission/eviction bookkeeping)
  std::size_t row_bytes = 0;     // rows * (D + S) * 4: the raw floor
  std::int64_t pulled_rows = 0;
  std::int64_t pushed_rows = 0;
  std::int64_t duplicate_pushes = 0;  // retried pushes acknowledged without applying them
  std::int64_t max_staleness = 0;     // bounded: largest (step - slowest clock) a pull was served at
  std::int64_t not_admitted_rows = 0; // admission: pushed rows dropped because not yet admitted
  std::int64_t evicted_rows = 0;
};

// Not thread-safe: the shard's request thread owns it (the store inside runs its partitions
// on OpenMP threads).
class ServerTable {
 public:
  // Throws ConfigError for a bad spec or optimiser (LocalEmbeddingStore's checks).
  ServerTable(TableConfig config, int num_partitions);

  const TableConfig& config() const { return config_; }
  const std::string& config_yaml() const { return config_yaml_; }
  const std::string& name() const { return config_.spec.name; }
  int dim() const { return static_cast<int>(config_.spec.dim); }
  LocalEmbeddingStore& store() { return *store_; }
  const LocalEmbeddingStore& store() const { return *store_; }

  // rows [U, D] = the rows of `ids` (created unless admission holds them back: then their
  // deterministic initial value, not stored). `step` orders eviction. A `repeat` (a retried
  // request already served once) is served alike but counted neither towards admission nor in
  // the pulled rows.
  void pull(std::span<const std::int64_t> ids, float* rows, std::uint64_t step, bool repeat = false);
  // The rows pull() would return, creating none and counting nothing towards admission or
  // eviction (LocalEmbeddingStore::peek): an evaluation leaves the table as it was.
  void peek(std::span<const std::int64_t> ids, float* rows) const { store_->peek(ids, rows); }
  // Applies the sparse optimiser to `ids` with grads [U, D] at `lr` (ids unique).
  void push(std::span<const std::int64_t> ids, const float* grads, double lr, std::uint64_t step);

  // Checkpoint tensors ("<name>.ids/.values/.state", rows sorted by id) and their inverse.
  std::vector<std::pair<std::string, Tensor>> save_rows() const { return store_->save_rows(); }
  void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows);

  TableStats& counters() { return stats_; }
  TableStats stats() const;
  // Ids with bookkeeping (admission counts, eviction ages): the rows held and, with admission,
  // ids seen too rarely to be admitted yet.
  std::size_t tracked_ids() const { return entries_.size(); }

 private:
  // Admission: splits ids into admitted (kept) and held-back positions; counts the request
  // unless `count` is false (a retried pull).
  bool admission_enabled() const { return config_.options.min_count > 1; }
  bool tracking_enabled() const { return admission_enabled() || config_.options.capacity_rows > 0; }
  void touch(std::span<const std::int64_t> ids, std::uint64_t step, bool count,
             std::vector<std::size_t>& admitted, std::vector<std::size_t>& held);
  void evict_if_needed();
  // Once per table: warns when one request alone holds more rows than the capacity (each
  // request then evicts rows, some of its own).
  void check_request_fits(std::size_t rows, std::uint64_t step);
  // With admission and a capacity: forgets the older half of the ids not admitted yet once they
  // outnumber the capacity, so a long tail of ids seen once does not grow the shard unbounded.
  void forget_unadmitted_if_needed();
  // The `count` least recently touched ids among the admitted (or the not yet admitted) ones,
  // ties by id, so every replica of a decision is the same.
  std::vector<std::int64_t> least_recent(bool admitted, std::size_t count) const;

  struct Entry {
    std::uint64_t count = 0;       // requests seen (admission)
    std::uint64_t last_step = 0;   // last step touched (eviction)
  };

  TableConfig config_;
  std::string config_yaml_;
  int num_partitions_;
  std::unique_ptr<LocalEmbeddingStore> store_;
  // Initial values of ids not admitted yet: pulled here, then cleared (never kept).
  std::unique_ptr<LocalEmbeddingStore> scratch_;
  // Per id bookkeeping, only with admission or eviction on (costs ~50 B per id tracked).
  std::unordered_map<std::int64_t, Entry> entries_;
  TableStats stats_;
  // Eviction log lines: each eviction at debug level; at info the first one, then at most one
  // summary per kEvictionReportInterval of those since (a small capacity evicts every step).
  std::int64_t unreported_evicted_rows_ = 0;
  std::int64_t unreported_evictions_ = 0;
  std::chrono::steady_clock::time_point last_eviction_report_{};
  bool eviction_reported_ = false;
  bool warned_request_over_capacity_ = false;
};

}  // namespace aiacc::ps
