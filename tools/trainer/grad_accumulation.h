// Gradient accumulation in the trainer (train.gradient_accumulation_steps: K): a step runs
// forward and backward over K micro-batches of data.batch_size each and takes one optimiser
// step on the mean of their gradients, as one batch K times larger would (exactly so for models
// without batch statistics; batch norm normalises each micro-batch alone, as in PyTorch). Only
// the last micro-batch's backward all-reduces the dense gradients and pushes the row
// gradients: a step communicates as much as with one micro-batch, whatever K.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/parameter.h"
#include "core/tensor.h"

namespace aiacc::trainer {

// The dense side. Its hooks must come first on each parameter (constructed before the ring's
// fuser or a device's host twins subscribe): a micro-batch's gradient joins a running sum as
// it becomes ready, and on the last micro-batch the hook leaves the mean in the gradient before
// the hooks after it read it, so the all-reduce still overlaps that backward.
class DenseGradAccumulator {
 public:
  DenseGradAccumulator(const std::vector<Parameter*>& params, int micro_batches);
  DenseGradAccumulator(const DenseGradAccumulator&) = delete;
  DenseGradAccumulator& operator=(const DenseGradAccumulator&) = delete;

  int micro_batches() const { return micro_batches_; }
  // Before micro-batch `index`'s backward (0 <= index < micro_batches()).
  void begin_micro_batch(int index);
  // After the last micro-batch's backward, before anything reduces the gradients: a parameter
  // whose hook did not fire in it (unused by that micro-batch) gets the mean over the step of
  // the micro-batches that did give it a gradient; one that none gave one keeps what the model
  // left, as without accumulation.
  void finish_step();

 private:
  struct Slot {
    Parameter* param = nullptr;
    Tensor sum;           // this step's earlier micro-batches' gradients, summed (allocated at first use)
    bool summed = false;  // sum holds at least one micro-batch's gradient of this step
    bool fired = false;   // the hook ran in the current micro-batch
  };
  void on_ready(Slot& slot);

  std::vector<std::unique_ptr<Slot>> slots_;  // each hook holds its slot's address
  int micro_batches_ = 1;
  int index_ = 0;
  float inverse_ = 1.0f;
};

// The sparse side: one table's row gradients over a step's micro-batches, the rows of an id
// summed (ids in first-seen order), handed to the store once, on the last micro-batch.
class SparseRowAccumulator {
 public:
  explicit SparseRowAccumulator(std::int64_t dim) : dim_(dim) {}

  // One micro-batch's rows: `ids` unique (a SparseGrad's), rows [ids.size(), dim].
  void add(std::span<const std::int64_t> ids, const float* rows);
  // Multiplies every summed row by `factor` (1/K: the mean over the micro-batches).
  void scale(float factor);
  std::span<const std::int64_t> ids() const { return ids_; }
  const float* rows() const { return rows_.data(); }
  void clear();

 private:
  std::int64_t dim_;
  std::vector<std::int64_t> ids_;
  std::vector<float> rows_;
  std::unordered_map<std::int64_t, std::size_t> row_of_;
};

}  // namespace aiacc::trainer
