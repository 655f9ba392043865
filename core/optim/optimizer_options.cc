// Cross-field checks of OptimizerOptions.
#include "core/optim/optimizer_options.h"

#include <fmt/format.h>

#include "core/config/node.h"

namespace aiacc::optim {

void OptimizerOptions::validate(const config::Node& node) const {
  if (nesterov) {
    if (type != "sgd")
      node.child("nesterov").fail(fmt::format("Nesterov applies to sgd only, type is {}", type));
    if (momentum <= 0.0) node.child("nesterov").fail("Nesterov momentum needs momentum > 0");
    if (dampening != 0.0) node.child("nesterov").fail("Nesterov momentum needs dampening 0");
  }
  // Momentum drives sgd's and lars's velocity (dampening sgd's alone); adam's is beta1, adagrad
  // and ftrl have none: accepted there, they would change nothing the user meant.
  if (type != "sgd" && type != "lars") {
    if (momentum != 0.0) {
      node.child("momentum").fail(fmt::format("applies to sgd and lars only, type is {}{}", type,
                                              type == "adam" || type == "adamw" || type == "lamb"
                                                  ? " (its momentum is beta1)" : ""));
    }
  }
  if (type != "sgd" && dampening != 0.0) {
    node.child("dampening").fail(fmt::format("applies to sgd only, type is {}", type));
  }
  if (type == "ftrl" && weight_decay != 0.0) {
    node.child("weight_decay").fail("ftrl regularises through l1 and l2; set weight_decay to 0");
  }
  if ((schedule.type == "cosine" || schedule.type == "linear") && schedule.min_lr > lr) {
    node.child("schedule")
        .child("min_lr")
        .fail(fmt::format("min_lr {} exceeds the base lr {}", schedule.min_lr, lr));
  }
}

}  // namespace aiacc::optim
