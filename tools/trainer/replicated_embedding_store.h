// ReplicatedEmbeddingStore: a sparse table placed on the ring. Every worker holds a full
// replica (a LocalEmbeddingStore); push() only records this worker's row gradients, and
// synchronize() (once per step, after backward, on every worker in the same order) all-gathers
// every worker's rows and applies one merged update: gradients of an id summed in worker
// order and divided by the number of workers, exactly like an all-reduced dense gradient. All
// replicas apply identical updates, so they stay bitwise equal.
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
  ReplicatedEmbeddingStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& optimizer,
                           ProcessGroup& group, const LocalEmbeddingStoreOptions& replica_options = {});
  const EmbeddingTableSpec& spec() const override { return replica_.spec(); }
  void pull(std::span<const std::int64_t> ids, float* rows) override { replica_.pull(ids, rows); }
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
  void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) override { replica_.load_rows(rows); }

 private:
  // This step's rows as [count i64][lr f64][ids i64 x count][grads f32 x count x dim], padded
  // to 8 bytes.
  void take_pending(std::vector<std::byte>& message);
  // Applies the merged rows of every worker's message part for this table; advances `offsets`.
  void apply(const std::vector<std::span<const std::byte>>& messages, std::vector<std::size_t>& offsets);

  LocalEmbeddingStore replica_;
  ProcessGroup& group_;
  std::vector<std::int64_t> ids_;
  std::vector<float> grads_;
  double lr_ = 0;
  // apply()'s scratch, kept between steps: the merged rows, and an open-addressing table from
  // id to merged row (index + 1; 0 is empty) whose used slots are cleared after each step. Id
  // and index share a slot: one cache line fetched per probe, not two.
  struct MergeSlot {
    std::int64_t id = 0;
    std::uint32_t index = 0;
  };
  std::vector<std::int64_t> merged_ids_;
  std::vector<float> merged_;
  std::vector<MergeSlot> merge_slots_;
  std::vector<std::uint32_t> used_slots_;
  std::vector<std::size_t> part_rows_;  // each worker's row count, as validated
};

}  // namespace aiacc::trainer
