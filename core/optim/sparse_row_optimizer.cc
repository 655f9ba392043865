// SparseRowOptimizer: row layouts and the per-row dispatch to the update rules.
#include "core/optim/sparse_row_optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <span>

#include "core/check.h"
#include "core/error.h"

namespace aiacc::optim {
namespace {

using detail::RuleType;

// Largest count a float holds exactly with every smaller integer: 2^24.
constexpr float kMaxRowStep = 16777216.0f;

// Advances the row's step counter and returns the new 1-based step.
std::int64_t advance(float& row_step) {
  if (row_step < kMaxRowStep) row_step += 1.0f;
  return static_cast<std::int64_t>(row_step);
}

}  // namespace

std::string sparse_rule_refusal(const std::string& type) {
  if (type != "lars" && type != "lamb") return "";
  return fmt::format("{} is a layer-wise rule and cannot update sparse rows one at a time "
                     "(expected one of: {})",
                     type, fmt::join(kSparseRuleNames, ", "));
}

SparseRowOptimizer::SparseRowOptimizer(const OptimizerOptions& options)
    : options_(options), type_(detail::parse_rule_type(options.type)), adagrad_(detail::adagrad_rule(options)) {
  if (const std::string refusal = sparse_rule_refusal(options.type); !refusal.empty()) {
    throw ConfigError("optimizer.type: " + refusal);
  }
}

int SparseRowOptimizer::state_floats(int dim) const {
  switch (type_) {
    case RuleType::sgd:
      return options_.momentum > 0.0 ? dim + 1 : 0;
    case RuleType::adagrad:
      return dim;
    case RuleType::adam:
    case RuleType::adamw:
      return 2 * dim + 1;
    case RuleType::ftrl:
      return 2 * dim;
    case RuleType::lars:
    case RuleType::lamb:
      break;
  }
  return 0;
}

void SparseRowOptimizer::init_state(float* state, int dim) const {
  const float initial =
      type_ == RuleType::adagrad ? static_cast<float>(options_.initial_accumulator) : 0.0f;
  std::fill(state, state + state_floats(dim), initial);
}

void SparseRowOptimizer::update_row_by_rule(float* value, float* state, const float* grad, int dim,
                                            double lr) const {
  AIACC_CHECK_GE(dim, 0, "row dimension");
  const auto n = static_cast<std::size_t>(dim);
  const std::span<float> w(value, n);
  const std::span<const float> g(grad, n);
  switch (type_) {
    case RuleType::sgd: {
      const SgdRule rule = detail::sgd_rule(options_);
      if (rule.state_per_element() == 0) {
        rule.update(w, g, {}, 1, lr);
      } else {
        const std::int64_t step = advance(state[n]);
        rule.update(w, g, std::span<float>(state, n), step, lr);
      }
      return;
    }
    case RuleType::adam:
    case RuleType::adamw: {
      const AdamRule rule = detail::adam_rule(options_, type_ == RuleType::adamw);
      const std::int64_t step = advance(state[2 * n]);
      rule.update(w, g, std::span<float>(state, n), std::span<float>(state + n, n), step, lr);
      return;
    }
    case RuleType::adagrad:  // update_row applies it inline; kept for completeness
      adagrad_.update(w, g, std::span<float>(state, n), lr);
      return;
    case RuleType::ftrl:
      detail::ftrl_rule(options_).update(w, g, std::span<float>(state, n),
                                         std::span<float>(state + n, n), lr);
      return;
    case RuleType::lars:
    case RuleType::lamb:
      break;
  }
  AIACC_CHECK(false, "unreachable: layer-wise rules are rejected at construction");
}

}  // namespace aiacc::optim
