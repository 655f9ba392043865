// ReplicatedEmbeddingStore: a sparse table placed on the ring. Every worker holds a full
// replica (a LocalEmbeddingStore); push() only records this worker's row gradients, and
// synchronize() (once per step, after backward, on every worker in the same order) all-gathers
// every worker's rows and applies one merged update: gradients of an id summed in worker
// order and multiplied by 1 / the number of workers, as an all-reduced dense gradient is
// averaged. All replicas apply identical updates, so they stay bitwise equal.
//
// Rows are named by a dense index after their first update: every replica numbers a table's
// rows in the order its merged updates first reach them, identically, since all apply the same
// messages in the same order. A row's index is a direct slot of the merge and the replica row's
// address is kept with it, so a step's known rows cost one lookup (their index, found when they
// are pulled and kept for the push of their gradients; looked up again when the push is not of
// the ids pulled): the merge and the update go by index and row address. Only rows updated for
// the first time go by id. Flights, two workers, traces alternated with the build before: the exchange
// and update took 31-54 us a step at the median, against 58-85. A table numbers at most
// max_numbered_rows rows (by default 65536, the first its updates reach: in CTR data mostly
// the frequent ones), so the numbering costs a few MiB at most however big the table grows
// (about 50 bytes a row: more than a dim-1 row itself); rows past it go by id every step.
// Each message carries the sender's count of numbered rows and a hash of their ids in order,
// so replicas whose numberings differ stop with an error naming the worker, rather than apply
// one worker's gradients to another's rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/embedding/local_embedding_store.h"
#include "tools/trainer/process_group.h"

namespace aiacc::trainer {

class ReplicatedEmbeddingStore final : public EmbeddingStore {
 public:
  static constexpr std::size_t kMaxNumberedRows = std::size_t{1} << 16;
  // `max_numbered_rows` must be the same on every worker (tests lower it).
  ReplicatedEmbeddingStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& optimizer,
                           ProcessGroup& group, const LocalEmbeddingStoreOptions& replica_options = {},
                           std::size_t max_numbered_rows = kMaxNumberedRows);
  const EmbeddingTableSpec& spec() const override { return replica_.spec(); }
  // Numbered rows are read through their index, the rest from the replica; the index each id
  // had is kept for a push of the same ids (see pulled_indices_). pull() and push() keep state
  // between them: one thread at a time (the trainer's training thread).
  void pull(std::span<const std::int64_t> ids, float* rows) override;
  void set_read_only(bool on) override { replica_.set_read_only(on); }
  // Records the gradient rows of this step (applied by synchronize()).
  void push(std::span<const std::int64_t> ids, const float* grads, double lr) override;
  // Collective over workers: merges every worker's pushed rows of each of `tables` (the same
  // tables in the same order on every worker) and applies them. One all-gather for all tables.
  // Returns the seconds spent in the all-gather (the communication; the rest is applying rows).
  static double synchronize(const std::vector<ReplicatedEmbeddingStore*>& tables, ProcessGroup& group);
  std::int64_t num_rows() const override { return replica_.num_rows(); }
  // The replica's raw row bytes (rows x (dim + optimiser state) x 4), as placement estimates them.
  std::size_t replica_bytes() const { return replica_.row_bytes(); }
  std::vector<std::pair<std::string, Tensor>> save_rows() const override { return replica_.save_rows(); }
  // Replaces the replica's rows; the dense numbering starts again (as on every worker, which all
  // load the same checkpoint).
  void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) override;

 private:
  // An open-addressing table (a power of two, at most half full) from id to index + 1 (0 is
  // empty). Id and index share a slot: one cache line fetched per probe, not two.
  struct IdSlot {
    std::int64_t id = 0;
    std::uint32_t index = 0;
  };
  // This step's rows go out as [known u64][new u64][lr f64][numbered rows u64][their hash u64]
  // [known indices u32, padded to 8][new ids i64][grads f32 x (known + new) x dim, known rows first],
  // padded to 8. classify_pending() sorts them into known and new and returns those bytes;
  // write_pending() writes them there and clears the step's rows.
  std::size_t classify_pending();
  void write_pending(std::byte* part);
  // Applies the merged rows of every worker's message part for this table; advances `offsets`.
  void apply(const std::vector<std::span<const std::byte>>& messages, std::vector<std::size_t>& offsets);
  void add_index(std::int64_t id, float* row);
  // Forgets every index (the replica's rows were replaced).
  void clear_indices();

  LocalEmbeddingStore replica_;
  ProcessGroup& group_;
  std::size_t max_numbered_rows_;
  std::vector<std::int64_t> ids_;
  std::vector<float> grads_;
  double lr_ = 0;
  // The dense numbering: id -> index, and each index's row in the replica.
  std::vector<IdSlot> index_slots_;
  std::vector<float*> row_of_index_;
  std::uint64_t numbering_hash_ = 0;  // of the numbered ids in order: replicas compare it each step
  std::uint64_t numbering_generation_ = 0;  // changes whenever an index is added or all are cleared
  // A model pushes the gradient rows of the very ids it pulled (its de-duplicated batch), and the
  // numbering changes only when rows are applied or loaded. So the pull's lookup serves the push
  // too: the last pull's ids and the index each had (kNotNumbered: none) under
  // pulled_generation_; a push of the same ids under the same numbering takes them. Any other
  // push (with gradient accumulation, the step's rows merged over its micro-batches) is looked up
  // (kLookUp) when the step's rows are classified, and so is every pending row where the
  // numbering changed since the step's first push. (Flights, two workers: about 1300 lookups a
  // step fewer.)
  static constexpr std::uint32_t kNotNumbered = UINT32_MAX;
  static constexpr std::uint32_t kLookUp = UINT32_MAX - 1;
  std::vector<std::int64_t> pulled_ids_;
  std::vector<std::uint32_t> pulled_indices_;
  std::uint64_t pulled_generation_ = 0;
  std::vector<std::uint32_t> pushed_indices_;  // per pending row: its index, kNotNumbered or kLookUp
  std::uint64_t pushed_generation_ = 0;        // the numbering pushed_indices_ hold indices of
  // pull()'s scratch: the numbered rows' addresses, the others' ids, positions and values.
  std::vector<const float*> pulled_rows_;
  std::vector<std::int64_t> unnumbered_ids_;
  std::vector<std::uint32_t> unnumbered_positions_;
  std::vector<float> unnumbered_rows_;
  // apply()'s scratch, kept between steps. Known rows merge through merge_of_index_ (per index:
  // merged position + 1, 0 none; the used ones are cleared after each step), new rows through
  // an id table like the index's, also cleared after each step.
  std::vector<std::uint32_t> merge_of_index_;
  std::vector<std::uint32_t> merged_known_;
  std::vector<float> merged_known_grads_;
  std::vector<float*> merged_known_rows_;
  std::vector<IdSlot> new_slots_;
  std::vector<std::uint32_t> used_new_slots_;
  std::vector<std::int64_t> merged_new_;
  std::vector<float> merged_new_grads_;
  std::vector<float*> merged_new_rows_;
  // classify_pending()'s scratch: the positions of this step's known and new rows, and the
  // indices; apply() reuses known_indices_ for every worker's indices, copied out of the messages.
  std::vector<std::uint32_t> known_positions_, new_positions_, known_indices_;
  struct PartCounts {
    std::size_t known = 0, fresh = 0;
  };
  std::vector<PartCounts> part_rows_;  // each worker's row counts, as validated
};

}  // namespace aiacc::trainer
