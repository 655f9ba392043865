// OptimizerOptions: the `optimizer` config section shared by the dense Optimizer (trainer) and the
// SparseRowOptimizer (parameter servers). Flat keys per hyperparameter; each rule reads the ones
// it uses (named in the doc) and ignores the rest, so a resolved dump always reads back.
#pragma once

#include <string>

#include "core/config/schema.h"
#include "core/optim/lr_schedule.h"

namespace aiacc::optim {

// Constraint for a decay factor: 0 <= value < 1 (1 would never forget, and breaks bias correction).
inline auto below_one() {
  return [](double v) {
    return (v >= 0.0 && v < 1.0) ? std::string() : std::string("expected a value in [0, 1)");
  };
}

struct OptimizerOptions {
  std::string type = "sgd";
  double lr = 0.1;
  double weight_decay = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double initial_accumulator = 0.0;
  double ftrl_beta = 1.0;
  double l1 = 0.0;
  double l2 = 0.0;
  double trust_coefficient = 1e-3;
  ScheduleOptions schedule;

  template <class V>
  void visit(V& v) {
    v.field("type", type, "update rule",
            config::one_of({"sgd", "adam", "adamw", "adagrad", "ftrl", "lars", "lamb"}));
    v.field("lr", lr, "base learning rate (ftrl: alpha)", config::greater_than(0.0));
    v.field("weight_decay", weight_decay,
            "L2 added to the gradient (sgd, adam, adagrad, lars); decoupled (adamw, lamb); "
            "not for ftrl (use l2)",
            config::at_least(0.0));
    v.field("momentum", momentum, "momentum factor, 0: none (sgd, lars)", below_one());
    v.field("dampening", dampening, "dampening of new gradients in the momentum (sgd)",
            config::in_range(0.0, 1.0));
    v.field("nesterov", nesterov, "Nesterov momentum (sgd; needs momentum > 0, dampening 0)");
    v.field("beta1", beta1, "first-moment decay (adam, adamw, lamb)", below_one());
    v.field("beta2", beta2, "second-moment decay (adam, adamw, lamb)", below_one());
    v.field("eps", eps, "denominator term (adam, adamw, lamb, adagrad)", config::greater_than(0.0));
    v.field("initial_accumulator", initial_accumulator,
            "starting sum of squared gradients (adagrad)", config::at_least(0.0));
    v.field("ftrl_beta", ftrl_beta, "per-coordinate rate smoothing beta (ftrl)",
            config::at_least(0.0));
    v.field("l1", l1, "L1 regularisation strength (ftrl)", config::at_least(0.0));
    v.field("l2", l2, "L2 regularisation strength (ftrl)", config::at_least(0.0));
    v.field("trust_coefficient", trust_coefficient, "trust ratio coefficient eta (lars)",
            config::greater_than(0.0));
    v.field("schedule", schedule, "learning-rate schedule");
  }
  // Checks across fields: Nesterov's requirements, ftrl without weight_decay, min_lr <= lr.
  void validate(const config::Node& node) const;
};

}  // namespace aiacc::optim
