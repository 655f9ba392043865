// OptimizerOptions read through the config system: defaults, every bound and cross-field check
// reported as a ConfigError naming the key, and the reference dump reading back.
#include "core/optim/optimizer_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "core/config/node.h"
#include "core/config/schema.h"
#include "core/error.h"

namespace aiacc::optim {
namespace {

using ::testing::HasSubstr;

OptimizerOptions parse(const std::string& text) {
  return config::read<OptimizerOptions>(config::Document::from_string(text, "opt.yaml").root());
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

TEST(OptimizerOptions, DefaultsAndTypedValues) {
  const OptimizerOptions d = parse("{}");
  EXPECT_EQ(d.type, "sgd");
  EXPECT_DOUBLE_EQ(d.lr, 0.1);
  EXPECT_EQ(d.schedule.type, "constant");
  const OptimizerOptions o = parse(
      "type: adamw\nlr: 3e-4\nweight_decay: 0.01\nbeta2: 0.98\n"
      "schedule: {type: cosine, warmup_steps: 100, min_lr: 1e-5, total_steps: 1000}\n");
  EXPECT_EQ(o.type, "adamw");
  EXPECT_DOUBLE_EQ(o.lr, 3e-4);
  EXPECT_DOUBLE_EQ(o.beta2, 0.98);
  EXPECT_EQ(o.schedule.type, "cosine");
  EXPECT_EQ(o.schedule.warmup_steps, 100);
  EXPECT_EQ(o.schedule.total_steps, 1000);
  EXPECT_EQ(parse("schedule: {type: multistep, milestones: [10, 20]}\n").schedule.milestones,
            (std::vector<std::int64_t>{10, 20}));
}

TEST(OptimizerOptions, OutOfBoundsValuesNameTheirKey) {
  EXPECT_THAT(error_of("lr: 0\n"), HasSubstr("opt.yaml:1:5: lr: expected a finite value > 0"));
  EXPECT_THAT(error_of("type: adma\n"), HasSubstr("did you mean 'adam'"));
  EXPECT_THAT(error_of("beta2: 1.0\n"), HasSubstr("beta2: expected a value in [0, 1)"));
  EXPECT_THAT(error_of("momentum: -0.1\n"), HasSubstr("momentum: expected a value in [0, 1)"));
  EXPECT_THAT(error_of("eps: 0\n"), HasSubstr("eps: expected a finite value > 0"));
  EXPECT_THAT(error_of("weight_decay: -1\n"), HasSubstr("weight_decay: expected a finite value >= 0"));
  EXPECT_THAT(error_of("dampening: 2\n"), HasSubstr("dampening: expected a value in [0, 1]"));
  EXPECT_THAT(error_of("schedule: {type: cos}\n"), HasSubstr("schedule.type: expected one of"));
  EXPECT_THAT(error_of("schedule: {warmup_steps: -1}\n"), HasSubstr("schedule.warmup_steps"));
  EXPECT_THAT(error_of("schedule: {gamma: 0}\n"),
              HasSubstr("schedule.gamma: expected a finite value > 0"));
  EXPECT_THAT(error_of("schedule: {step_size: 0}\n"), HasSubstr("schedule.step_size"));
  EXPECT_THAT(error_of("momentun: 0.9\n"), HasSubstr("did you mean 'momentum'"));
}

TEST(OptimizerOptions, CrossFieldChecksNameTheirKey) {
  EXPECT_THAT(error_of("nesterov: true\n"),
              HasSubstr("nesterov: Nesterov momentum needs momentum > 0"));
  EXPECT_THAT(error_of("nesterov: true\nmomentum: 0.9\ndampening: 0.1\n"),
              HasSubstr("nesterov: Nesterov momentum needs dampening 0"));
  EXPECT_THAT(error_of("type: adam\nnesterov: true\nmomentum: 0.9\n"),
              HasSubstr("applies to sgd only"));
  EXPECT_THAT(error_of("type: ftrl\nweight_decay: 0.1\n"),
              HasSubstr("weight_decay: ftrl regularises"));
  EXPECT_THAT(error_of("lr: 0.1\nschedule: {type: cosine, min_lr: 0.5}\n"),
              HasSubstr("schedule.min_lr: min_lr 0.5 exceeds the base lr 0.1"));
  EXPECT_THAT(error_of("schedule: {type: multistep, milestones: [10, 5]}\n"),
              HasSubstr("schedule.milestones[1]"));
  EXPECT_THAT(error_of("schedule: {type: multistep, milestones: [10, 5]}\n"),
              HasSubstr("strictly increasing"));
  EXPECT_THAT(error_of("schedule: {type: multistep}\n"),
              HasSubstr("schedule.milestones: multistep needs"));
  EXPECT_THAT(error_of("schedule: {type: cosine, warmup_steps: 10, total_steps: 10}\n"),
              HasSubstr("schedule.total_steps"));
  EXPECT_EQ(error_of("nesterov: true\nmomentum: 0.9\n"), "<no ConfigError>");
}

TEST(OptimizerOptions, ReferenceDumpListsEveryKeyAndReadsBack) {
  const std::string text = config::write(OptimizerOptions{}, config::Writer::Mode::reference);
  for (const char* key : {"type: sgd",
                          "lr: 0.1",
                          "weight_decay: 0.0",
                          "momentum: 0.0",
                          "dampening: 0.0",
                          "nesterov: false",
                          "beta1: 0.9",
                          "beta2: 0.999",
                          "eps: 1e-08",
                          "initial_accumulator: 0.0",
                          "ftrl_beta: 1.0",
                          "l1: 0.0",
                          "l2: 0.0",
                          "trust_coefficient: 0.001",
                          "schedule:",
                          "warmup_steps: 0",
                          "warmup_start_factor: 0.0",
                          "milestones: []",
                          "gamma: 0.1",
                          "step_size: 1000",
                          "min_lr: 0.0",
                          "total_steps: 0"}) {
    EXPECT_THAT(text, HasSubstr(key));
  }
  const OptimizerOptions again =
      config::read<OptimizerOptions>(config::Document::from_string(text, "reference").root());
  EXPECT_EQ(config::write(again, config::Writer::Mode::reference), text);
}

}  // namespace
}  // namespace aiacc::optim
