#include "tools/trainer/early_stopping.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::trainer {

bool EarlyStopping::improves(double value) const {
  if (std::isnan(value)) return false;
  if (!best_) return true;
  const bool lower_is_better = options_.metric == "loss" || options_.metric == "log_loss";
  return lower_is_better ? value < *best_ - options_.min_delta : value > *best_ + options_.min_delta;
}

bool EarlyStopping::observe(double value, std::int64_t step, bool may_stop) {
  improved_last_ = false;
  if (!tracking() || stopped_) return stopped_;
  if (improves(value)) {
    best_ = value;
    best_step_ = step;
    without_improvement_ = 0;
    improved_last_ = true;
    return false;
  }
  ++without_improvement_;
  stopped_ = may_stop && enabled() && without_improvement_ >= options_.patience;
  return stopped_;
}

std::string EarlyStopping::describe() const {
  if (!best_) return fmt::format("no evaluation of test {} improved on anything yet", options_.metric);
  return fmt::format("test {} {:.4f} at step {}, the best; {} evaluation(s) since without an improvement of more "
                     "than {}",
                     options_.metric, *best_, best_step_, without_improvement_, options_.min_delta);
}

nlohmann::json EarlyStopping::to_json() const {
  return {{"metric", options_.metric},
          {"best", best_ ? nlohmann::json(*best_) : nlohmann::json()},
          {"best_step", best_step_},
          {"evaluations_without_improvement", without_improvement_},
          {"stopped", stopped_}};
}

void EarlyStopping::restore(const nlohmann::json& state) {
  // A checkpoint that watched another metric says nothing about this one: start afresh.
  if (state.value("metric", std::string()) != options_.metric) return;
  try {
    if (!state.at("best").is_null()) best_ = state.at("best").get<double>();
    best_step_ = state.at("best_step").get<std::int64_t>();
    without_improvement_ = state.at("evaluations_without_improvement").get<std::int64_t>();
    // Against this job's patience, which may have been raised to train on.
    stopped_ = state.at("stopped").get<bool>() && enabled() && without_improvement_ >= options_.patience;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("the checkpoint's early_stopping state is malformed: {}", e.what()));
  }
}

}  // namespace aiacc::trainer
