// LocalEmbeddingStore: an in-process EmbeddingStore, and the storage engine of a parameter-server
// shard (shared/DESIGN.md §5). Rows live in P partitions chosen by a hash of the id; each
// partition is an open-addressing table over a block arena holding [value | optimiser state] per
// row, and has its own lock, so pull and push run the partitions in parallel (OpenMP) without a
// global lock (with one thread, or for a small request, one thread takes the request's
// partitions together, all locked for its duration). Rows are created on first touch (pull or
// push) from (id, spec.seed) alone.
// Legend: U = ids in a request, D = spec.dim, S = optimiser state floats per row.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/embedding/detail/row_table.h"
#include "core/embedding/embedding_store.h"
#include "core/optim/optimizer_options.h"
#include "core/optim/sparse_row_optimizer.h"

namespace aiacc {

struct LocalEmbeddingStoreOptions {
  // P. 16: enough to keep 16 cores busy on one request; each partition costs only a few hundred
  // bytes when empty. Results never depend on it (nor on the thread count).
  int num_partitions = 16;
  // Load bound of each slot table: it grows by 1.5x past this, so the load stays in
  // [0.5, 0.75] and a row costs 16 / load = 21..32 bytes of slots on top of its (D + S) floats.
  double max_load_factor = 0.75;
  // B: a partition's arena grows by blocks of 64, 64, 128, ... rows up to B rows, then by B
  // rows at a time; 0: 2-4 MiB worth (a power of two in [64, 2^20]), so huge pages back them.
  std::int64_t rows_per_block = 0;
  // Requests moving fewer floats than this run on the calling thread only: an OpenMP fork/join
  // costs more than copying a small batch's rows.
  std::int64_t min_parallel_floats = std::int64_t{1} << 15;
};

// Thread-safety: every method may be called concurrently from several threads. A request locks
// the partitions it touches (several at once in index order), so concurrent requests
// serialise on shared partitions only; a pull concurrent with a push of the same id returns
// the row before or after that update, never a torn one.
class LocalEmbeddingStore final : public EmbeddingStore {
 public:
  // Throws ConfigError naming the table for dim < 1, negative init_scale, a sparse optimiser
  // that cannot update rows one at a time (lars, lamb), or bad options.
  LocalEmbeddingStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& sparse_optimizer,
                      const LocalEmbeddingStoreOptions& options = {});
  LocalEmbeddingStore(const LocalEmbeddingStore&) = delete;
  LocalEmbeddingStore& operator=(const LocalEmbeddingStore&) = delete;

  const EmbeddingTableSpec& spec() const override { return spec_; }

  // rows [U, D] = the current values of `ids`, creating missing rows with their deterministic
  // initial value uniform(-init_scale, init_scale) drawn from Rng(mix64(id ^ seed)) and fresh
  // optimiser state. Any int64 is a valid id. Duplicate ids are allowed (each gets the row).
  // Empty `ids`: no-op (rows may be null). Blocks until done.
  void pull(std::span<const std::int64_t> ids, float* rows) override;
  // pull() without creating rows: ids the table does not hold get the initial value a pull
  // would give them, and the table stays as it was (an evaluation reads a model, it does not
  // grow it). One lookup per id under its partition's lock: for evaluation, not training.
  void peek(std::span<const std::int64_t> ids, float* rows) const;
  // While on, pull() is peek().
  void set_read_only(bool on) override { read_only_.store(on); }

  // Applies the sparse optimiser to the row of each id with its gradient row grads[i] [D] at
  // learning rate `lr`, creating missing rows first (as pull would). `ids` should be unique
  // (callers aggregate per id); a duplicate id is NOT rejected: its updates apply one after the
  // other in request order, which is deterministic but differs from one update with the summed
  // gradient for stateful rules. Blocks until applied.
  void push(std::span<const std::int64_t> ids, const float* grads, double lr) override;

  // Row addresses for a caller that updates the same rows step after step (a replicated table's
  // merged update, tools/trainer): rows_of() finds each id's row, creating missing ones as pull()
  // would, and writes its address ([value D | optimiser state S]) to rows[i]; push_rows() applies
  // the sparse optimiser to rows so found with gradient rows grads[i] [D], without looking them
  // up again. A row keeps its address until load_rows() replaces the table's contents (rows are
  // never moved or freed before). push_rows() locks every partition; rows must be distinct.
  void rows_of(std::span<const std::int64_t> ids, float** rows);
  void push_rows(std::span<float* const> rows, const float* grads, double lr);

  std::int64_t num_rows() const override;

  // "<name>.ids" i64 [R], "<name>.values" f32 [R, D], "<name>.state" f32 [R, S], rows sorted by
  // id (so the output depends only on the contents, not on P or insertion order).
  std::vector<std::pair<std::string, Tensor>> save_rows() const override;
  // Replaces the contents with `rows` (the three tensors above; tensors of other names are
  // ignored). Throws DataError naming the tensor on a missing tensor, a wrong dtype or shape
  // (e.g. a checkpoint of another dim, or of an optimiser with another state size) or a
  // duplicate id; the store is unchanged then.
  void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) override;

  // Pre-sizes every partition for about `rows` rows in total (avoids rehashing while filling).
  void reserve(std::int64_t rows);

  // Bytes held by slots and arena blocks (the store's memory, apart from a small constant).
  std::size_t memory_bytes() const;
  // Raw row bytes: num_rows() * (D + S) * 4, the floor memory_bytes() is compared with.
  std::size_t row_bytes() const;

  int num_partitions() const { return static_cast<int>(partitions_.size()); }
  int state_floats() const { return state_floats_; }
  // The partition an id lands in (for tests that want all ids in one partition).
  static int partition_of(std::int64_t id, int num_partitions) {
    return embedding::detail::partition_of_hash(embedding::detail::row_hash(id), num_partitions);
  }

 private:
  struct Partition {
    explicit Partition(embedding::detail::RowTable table) : table(std::move(table)) {}
    mutable std::mutex mutex;
    embedding::detail::RowTable table;
  };

  // Runs visit(position, row) for each position with the row of ids[position] (created when
  // missing). Large requests with more than one thread: positions grouped by partition, one
  // partition per task, positions of a partition in request order (hence deterministic).
  // `row_floats`: how much of each row the visit touches (prefetched ahead).
  template <class Visit>
  void for_each_row(std::span<const std::int64_t> ids, std::size_t row_floats, Visit&& visit);
  // for_each_row on the calling thread (a request too small to share out, or one OpenMP
  // thread): the touched partitions locked together, positions in request order. A failure
  // part-way (memory) leaves the rows before it created, as the partitioned loop leaves other
  // partitions' rows: neither is atomic.
  template <class Visit>
  void for_each_row_serial(std::span<const std::int64_t> ids, std::size_t row_floats, Visit& visit);
  void init_row(std::int64_t id, float* row) const;
  embedding::detail::RowTable make_table() const;

  EmbeddingTableSpec spec_;
  optim::SparseRowOptimizer optimizer_;
  LocalEmbeddingStoreOptions options_;
  int dim_;
  int state_floats_;
  std::int64_t rows_per_block_;
  std::vector<std::unique_ptr<Partition>> partitions_;
  std::atomic<bool> read_only_{false};
};

// A factory serving every table from its own LocalEmbeddingStore with `sparse_optimizer`.
EmbeddingStoreFactory local_embedding_store_factory(const optim::OptimizerOptions& sparse_optimizer,
                                                    const LocalEmbeddingStoreOptions& options = {});

}  // namespace aiacc
