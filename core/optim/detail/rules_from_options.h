// Internal to core/optim: the rule type enum and each rule's hyperparameters from the config.
// Shared by the dense Optimizer and the SparseRowOptimizer; not part of the public API.
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/error.h"
#include "core/optim/adagrad.h"
#include "core/optim/adam.h"
#include "core/optim/ftrl.h"
#include "core/optim/lamb.h"
#include "core/optim/lars.h"
#include "core/optim/optimizer_options.h"
#include "core/optim/sgd.h"

namespace aiacc::optim::detail {

enum class RuleType { sgd, adam, adamw, adagrad, ftrl, lars, lamb };

inline RuleType parse_rule_type(const std::string& type) {
  if (type == "sgd") return RuleType::sgd;
  if (type == "adam") return RuleType::adam;
  if (type == "adamw") return RuleType::adamw;
  if (type == "adagrad") return RuleType::adagrad;
  if (type == "ftrl") return RuleType::ftrl;
  if (type == "lars") return RuleType::lars;
  if (type == "lamb") return RuleType::lamb;
  throw ConfigError(fmt::format(
      "optimizer.type: unknown update rule '{}' (expected one of: sgd, adam, adamw, adagrad, ftrl, "
      "lars, lamb)",
      type));
}

inline SgdRule sgd_rule(const OptimizerOptions& o) {
  return {o.momentum, o.dampening, o.nesterov, o.weight_decay};
}
inline AdamRule adam_rule(const OptimizerOptions& o, bool decoupled) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay, decoupled};
}
inline AdagradRule adagrad_rule(const OptimizerOptions& o) {
  return {o.eps, o.weight_decay, o.initial_accumulator};
}
inline FtrlRule ftrl_rule(const OptimizerOptions& o) { return {o.ftrl_beta, o.l1, o.l2}; }
inline LarsRule lars_rule(const OptimizerOptions& o) {
  return {o.momentum, o.weight_decay, o.trust_coefficient};
}
inline LambRule lamb_rule(const OptimizerOptions& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

}  // namespace aiacc::optim::detail
