// EmbeddingBag layer: pools the rows of one categorical field's ids per example (sum or mean)
// from a local table. The layer de-duplicates the batch's ids, gathers each touched row once
// into a contiguous [U, D] buffer and runs the storage-independent kernel on it, so the rows
// can later come from a parameter server instead (shared/DESIGN.md §3, §5).
// Legend: N = batch, P = ids in the batch, U = unique rows, D = dim, R = num_rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/kernels/dedup.h"
#include "core/kernels/embedding_bag.h"
#include "core/parameter.h"

namespace aiacc::models {

struct EmbeddingBagOptions {
  std::int64_t num_rows = 0;                      // R, rows of the local table
  std::int64_t dim = 0;                           // D
  kernels::BagMode mode = kernels::BagMode::sum;  // pooling per example
  double init_scale = 0.05;                       // rows start uniform(-init_scale, init_scale)
  std::uint64_t seed = 0;                         // row r draws from Rng(seed, r)
  DType dtype = DType::f32;                       // f32, or f64 for gradient checks
};

// Not a Layer: its input is a SparseField, not a Tensor. Not thread-safe.
class EmbeddingBag {
 public:
  // Parameter "<name>.weight": ParamKind::sparse, value = the table [R, D], initialised row by
  // row from (seed, row) so a row's start value does not depend on the table size.
  EmbeddingBag(std::string name, const EmbeddingBagOptions& options);
  EmbeddingBag(const EmbeddingBag&) = delete;
  EmbeddingBag& operator=(const EmbeddingBag&) = delete;

  // field: N = offsets.size() - 1 bags -> [N, D]. An id addresses table row
  // (uint64)id % R (any int64 is valid: hashed features fold onto the local table; a
  // parameter-server table will use the id itself). An empty bag gives zeros. Throws
  // InternalError naming the layer on malformed offsets.
  Tensor forward(const SparseField& field);

  // grad_output [N, D] -> weight's sparse_grad(): ids = the unique table rows of the last
  // forward (first-seen order), rows [U, D] = their summed gradients (OVERWRITTEN). Then fires
  // grad_ready() once.
  void backward(const Tensor& grad_output);

  std::vector<Parameter*> parameters() { return {&table_}; }
  const std::string& name() const { return name_; }
  Parameter& table() { return table_; }
  std::int64_t row_of(std::int64_t id) const {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(id) %
                                     static_cast<std::uint64_t>(options_.num_rows));
  }
  // The last forward's unique rows and per-id indices into them.
  const kernels::DedupResult& dedup() const { return dedup_; }

 private:
  // unique_rows [U, D] = table rows dedup_.unique_ids: the step a parameter-server pull replaces.
  Tensor gather_rows() const;

  std::string name_;
  EmbeddingBagOptions options_;
  Parameter table_;
  kernels::IdDeduplicator deduplicator_;
  kernels::DedupResult dedup_;
  std::vector<std::int64_t> rows_;     // [P] table row of each id (scratch)
  std::vector<std::int64_t> offsets_;  // [N + 1] the last forward's bags
  bool has_forward_ = false;
};

}  // namespace aiacc::models
