// SparseRowOptimizer: the update rule a parameter server applies to one embedding row at a time.
// A server keeps [value (dim floats) | state (state_floats(dim) floats)] contiguously per row; the
// state layout per type is (planes of dim floats, then scalars):
//   sgd      momentum 0: nothing;  momentum > 0: [momentum | row_step]
//   adagrad  [sum]
//   adam(w)  [exp_avg | exp_avg_sq | row_step]   (lazy Adam: bias correction by the row's step)
//   ftrl     [z | n]
// row_step counts the updates of that row, stored as a float: exact up to 2^24, where it stops
// growing (by then every bias correction 1 - beta^t is 1 in double anyway).
#pragma once

#include <string>
#include <string_view>

#include "core/optim/detail/rules_from_options.h"
#include "core/optim/optimizer_options.h"

namespace aiacc::optim {

// The rules that update sparse rows one at a time (optimizer.type values a table may take).
inline constexpr std::string_view kSparseRuleNames[] = {"sgd", "adam", "adamw", "adagrad", "ftrl"};

// Why `type` cannot update sparse rows ("lamb is a layer-wise rule ..."), or "" when it can:
// layer-wise rules (lars, lamb) need the whole tensor's norms.
std::string sparse_rule_refusal(const std::string& type);

class SparseRowOptimizer {
 public:
  // Throws ConfigError naming optimizer.type for lars and lamb (layer-wise rules need the whole
  // table) and for unknown types.
  explicit SparseRowOptimizer(const OptimizerOptions& options);

  // Floats of optimiser state per row of `dim` weights.
  int state_floats(int dim) const;

  // Writes a fresh row's state (zeros; adagrad's sum at initial_accumulator) into
  // state[0, state_floats(dim)).
  void init_state(float* state, int dim) const;

  // Applies one update with the row's aggregated gradient `grad` [dim] and learning rate `lr`
  // (already scheduled by the caller) to value [dim] and state [state_floats(dim)], in place.
  // Weight decay, if configured, applies to the touched row only. Const and free of shared
  // state: safe to call concurrently on distinct rows.
  // Adagrad, the common sparse rule, is applied inline; the others through one call.
  void update_row(float* value, float* state, const float* grad, int dim, double lr) const {
    if (type_ == detail::RuleType::adagrad) {
      adagrad_.update_elements(value, grad, state, static_cast<std::size_t>(dim), lr);
      return;
    }
    update_row_by_rule(value, state, grad, dim, lr);
  }

  const std::string& type() const { return options_.type; }

 private:
  void update_row_by_rule(float* value, float* state, const float* grad, int dim, double lr) const;

  OptimizerOptions options_;
  detail::RuleType type_;
  AdagradRule adagrad_;  // from options_ (the rule's parameters, read per row)
};

}  // namespace aiacc::optim
