// train.early_stopping: stop training once a test metric has stopped improving, as Keras's and
// Lightning's EarlyStopping callbacks do. Every evaluation (after an epoch, every
// train.eval_every_steps steps) is one observation; the job stops after `patience` of them in a
// row without an improvement of more than `min_delta` over the best so far. Evaluations merge
// every worker's scores, so every worker sees the same value and stops at the same step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/schema.h"

namespace aiacc::trainer {

struct EarlyStoppingOptions {
  std::string metric = "loss";
  std::int64_t patience = 0;
  double min_delta = 0.0;

  template <class V>
  void visit(V& v) {
    v.field("metric", metric,
            "the test metric watched: loss or log_loss (lower is better), accuracy or auc (higher is better; auc "
            "and log_loss for binary tasks)",
            config::one_of({"loss", "log_loss", "accuracy", "auc"}));
    v.field("patience", patience,
            "stop after this many evaluations in a row without an improvement (0: never stop early); needs "
            "train.eval_each_epoch or train.eval_every_steps",
            config::at_least<std::int64_t>(0));
    v.field("min_delta", min_delta, "an improvement must beat the best value so far by more than this",
            config::at_least(0.0));
  }
};

class EarlyStopping {
 public:
  // `track_best`: follow the best evaluation even without stopping (train.checkpoint.keep_best).
  explicit EarlyStopping(EarlyStoppingOptions options, bool track_best = false)
      : options_(std::move(options)), track_best_(track_best) {}

  // Whether it may stop the job (a patience), and whether it watches the evaluations at all.
  bool enabled() const { return options_.patience > 0; }
  bool tracking() const { return enabled() || track_best_; }
  const std::string& metric() const { return options_.metric; }
  // One evaluation's value of the metric at `step` (NaN never improves). Returns true when the
  // job should stop now; `may_stop` false (the job's last step) records the evaluation without
  // stopping, so a job resumed with more steps is not taken for one that stopped early.
  bool observe(double value, std::int64_t step, bool may_stop = true);
  // Forgets the best so far (its checkpoint is gone): the next evaluation is the best.
  void forget_best() { best_.reset(); }
  bool stopped() const { return stopped_; }
  // The last observation was a new best; the best so far and its step.
  bool improved_last() const { return improved_last_; }
  std::optional<double> best() const { return best_; }
  std::int64_t best_step() const { return best_step_; }
  // "test auc 0.7912 at step 400, the best; 3 evaluations since without an improvement of more
  // than 0.001".
  std::string describe() const;

  // The state a checkpoint keeps, so a resumed job goes on counting (or stays stopped).
  nlohmann::json to_json() const;
  void restore(const nlohmann::json& state);

 private:
  bool improves(double value) const;

  EarlyStoppingOptions options_;
  bool track_best_ = false;
  bool improved_last_ = false;
  std::optional<double> best_;
  std::int64_t best_step_ = 0;
  std::int64_t without_improvement_ = 0;
  bool stopped_ = false;
};

}  // namespace aiacc::trainer
