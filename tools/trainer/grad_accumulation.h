// Gradient accumulation in the trainer (train.gradient_accumulation_steps: K): a step runs
// forward and backward over K micro-batches of data.batch_size each and takes one optimiser
// step on the mean of their gradients, as one batch K times larger would (exactly so for models
// without batch statistics; batch norm normalises each micro-batch alone, as in PyTorch). Only
// the last micro-batch's backward all-reduces the dense gradients, and the row gradients are
// pushed (or exchanged between replicas) once a step; parameter-server rows are still pulled for
// every micro-batch.
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
// fuser or a device's host copies subscribe): a micro-batch's gradient joins a running sum as
// it becomes ready, and on the last micro-batch the hook leaves the step's sum in the gradient
// before the hooks after it read it, so the all-reduce still overlaps that backward. The sum
// becomes the mean after the reduction (scale_gradients), in one pass over all gradients: on a
// GPU, scaling each gradient in its hook would wait for the device once per parameter.
class DenseGradAccumulator {
 public:
  DenseGradAccumulator(const std::vector<Parameter*>& params, int micro_batches);
  DenseGradAccumulator(const DenseGradAccumulator&) = delete;
  DenseGradAccumulator& operator=(const DenseGradAccumulator&) = delete;

  int micro_batches() const { return micro_batches_; }
  // Before micro-batch `index`'s backward (0 <= index < micro_batches()).
  void begin_micro_batch(int index);
  // After the last micro-batch's backward, before the gradients are reduced: a parameter whose
  // hook did not fire in it (unused by that micro-batch) but did in an earlier one gets the
  // step's sum, and its later hooks (the all-reduce's) fire now. One that no micro-batch gave a
  // gradient keeps what the model left, as without accumulation.
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
  bool finishing_ = false;  // finish_step() fires hooks: this class's own then does nothing
};

// Multiplies the gradients of `params` by `factor`: host ones on the CPU, device ones in one
// DeviceOps call (one wait). Returns the index in `params` of the first whose gradient held a
// NaN or an infinity before, or -1.
std::int64_t scale_gradients(const std::vector<Parameter*>& params, float factor);

// The sparse side: one table's row gradients over a step's micro-batches, the rows of an id
// summed (ids in first-seen order), handed to the store once, on the last micro-batch.
class SparseRowAccumulator {
 public:
  explicit SparseRowAccumulator(std::int64_t dim) : dim_(dim) {}

  struct StepRows {
    std::span<const std::int64_t> ids;
    const float* rows = nullptr;  // [ids.size(), dim]
  };
  // One micro-batch's rows: `ids` unique (a SparseGrad's), rows [ids.size(), dim]. The first
  // call after finish() starts the next step.
  void add(std::span<const std::int64_t> ids, const float* rows);
  // A micro-batch whose rows were not finite: the step pushes none of the table's rows.
  void skip();
  // The step's rows: each id once, with the mean of its rows over `micro_batches` (those that
  // did not touch it counting as zero); none after a skip(). Valid until the next add() or skip().
  StepRows finish(int micro_batches);

 private:
  void start_step_if_finished();

  std::int64_t dim_;
  std::vector<std::int64_t> ids_;
  std::vector<float> rows_;
  std::unordered_map<std::int64_t, std::size_t> row_of_;
  bool skipped_ = false;
  bool finished_ = false;
};

}  // namespace aiacc::trainer
