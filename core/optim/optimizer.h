// Optimizer: the dense optimiser the trainer steps after gradients are synchronised. It owns the
// per-parameter state (allocated once), applies the configured update rule to every parameter,
// and exposes its state under PyTorch-like names for checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/optim/detail/rules_from_options.h"
#include "core/optim/optimizer_options.h"
#include "core/parameter.h"
#include "core/tensor.h"

namespace aiacc::optim {

// Named state tensors: "<param>.<plane>" for each parameter and "step" (int64 scalar).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  // `params` are non-owning and must outlive the optimizer; each must be dense, f32, with a grad
  // of the value's shape on its device and a unique name (InternalError otherwise). sgd, adam and
  // adamw also step parameters on a device (through DeviceOps, state there); the others need
  // CPU parameters. Allocates the
  // state (zeros; adagrad's sum at initial_accumulator). ConfigError for an unknown type.
  Optimizer(const OptimizerOptions& options, std::vector<Parameter*> params);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Advances the step count, then applies the rule with learning rate `lr` to every parameter,
  // reading grad() and updating value() in place. Parameters with decays() == false get no weight
  // decay and, for lars and lamb, no trust-ratio adaptation (ratio 1). Large tensors are split
  // into fixed chunks run with OpenMP; results do not depend on the thread count. Does not zero
  // the gradients. Not thread-safe.
  void step(double lr);

  // Steps taken so far (the 1-based step of the last update; 0 before the first).
  std::int64_t step_count() const { return step_; }
  const OptimizerOptions& options() const { return options_; }

  // The state by name, per parameter in construction order, then "step": sgd/lars with momentum
  // "<p>.momentum"; adam, adamw, lamb "<p>.exp_avg", "<p>.exp_avg_sq"; adagrad "<p>.sum";
  // ftrl "<p>.z", "<p>.n". (lars' momentum is the paper's velocity, which includes lr.) The
  // tensors share storage with the live state (clone to snapshot).
  NamedTensors state() const;

  // Copies `state` (as returned by state(), possibly from another process) into the live state.
  // Throws DataError naming the tensor when one is missing, unexpected, or of the wrong shape or
  // dtype; the live state is untouched in that case.
  void load_state(const NamedTensors& state);

 private:
  struct Slot {
    Parameter* param;
    std::vector<Tensor> planes;  // per-element state, each shaped like the parameter
  };
  std::vector<const char*> plane_names() const;
  void step_parameter(Slot& slot, double lr);
  void step_on_device(Slot& slot, double lr);  // sgd, adam, adamw through DeviceOps
  void step_lars(Slot& slot, double lr);
  void step_lamb(Slot& slot, double lr);

  OptimizerOptions options_;
  detail::RuleType type_;
  std::vector<Slot> slots_;
  std::vector<SquaredNorms> partial_norms_;  // per chunk, reused by lars and lamb
  std::int64_t step_ = 0;
};

}  // namespace aiacc::optim
