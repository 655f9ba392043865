// SparseEmbedding: an embedding bag whose table lives in an EmbeddingStore (local or parameter
// servers). Forward de-duplicates the field's ids, pulls each unique row once into the
// parameter's value [U, D] and pools them per example; backward fills the parameter's
// sparse_grad (unique ids, gradient rows) and fires grad_ready() once. The layer never pushes:
// whoever subscribed to grad_ready() (the trainer) pushes to the store (shared/DESIGN.md §3).
// Legend: N = batch, P = ids in the batch, U = unique ids, D = the table's dim.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/batch.h"
#include "core/embedding/embedding_store.h"
#include "core/kernels/dedup.h"
#include "core/kernels/embedding_bag.h"
#include "core/parameter.h"

namespace aiacc::models {

// Not a Layer (its input is a SparseField). Not thread-safe; the store may be shared.
class SparseEmbedding {
 public:
  // The parameter is named store->spec().name, ParamKind::sparse, value [0, D] until the first
  // forward. `dtype` f32, or f64 for gradient checks (pulled float rows are converted, and
  // sparse_grad().rows is f64 then). Throws InternalError for a null store or another dtype.
  SparseEmbedding(std::shared_ptr<EmbeddingStore> store, kernels::BagMode mode, DType dtype);
  SparseEmbedding(const SparseEmbedding&) = delete;
  SparseEmbedding& operator=(const SparseEmbedding&) = delete;

  // field: N = offsets.size() - 1 bags of ids (any int64, used as the store's ids) -> [N, D].
  // Pulls the U unique ids (blocking, one pull per call) into parameter().value(); an empty bag
  // gives zeros. Throws InternalError naming the table on malformed offsets.
  Tensor forward(const SparseField& field);

  // grad_output [N, D] -> parameter().sparse_grad() = (unique ids in first-seen order, summed
  // gradient rows [U, D]), OVERWRITTEN; then grad_ready() once. Call once per forward.
  void backward(const Tensor& grad_output);

  // The two halves of forward() and backward() for a model that pools elsewhere (on a device):
  // pull() de-duplicates and pulls as forward() does, leaving the unique rows in
  // parameter().value() [U, D], each position's unique row in unique_indices() [P] and the bags
  // in offsets() [N + 1]; set_gradient_rows() takes the gradient of those rows [U, D] (f32 or
  // the layer's dtype) as backward() would have computed it, then fires grad_ready() once.
  void pull(const SparseField& field);
  const std::vector<std::int64_t>& unique_indices() const { return dedup_.inverse; }
  const std::vector<std::int64_t>& offsets() const { return offsets_; }
  std::int64_t num_unique() const { return static_cast<std::int64_t>(dedup_.unique_ids.size()); }
  void set_gradient_rows(Tensor rows);

  Parameter& parameter() { return param_; }
  EmbeddingStore& store() { return *store_; }
  std::int64_t dim() const { return dim_; }

 private:
  std::shared_ptr<EmbeddingStore> store_;
  kernels::BagMode mode_;
  DType dtype_;
  std::int64_t dim_;
  Parameter param_;
  kernels::IdDeduplicator deduplicator_;
  kernels::DedupResult dedup_;
  std::vector<std::int64_t> offsets_;  // [N + 1] of the last forward
  bool has_forward_ = false;
};

}  // namespace aiacc::models
