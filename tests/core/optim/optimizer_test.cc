// The dense Optimizer: dispatch to each rule with the configured hyperparameters, decays()==false
// handling, state naming, bitwise checkpoint continuation, chunked parallel updates of large
// tensors, and rejection of unusable parameters or checkpoints.
#include "core/optim/optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <memory>

#include "core/error.h"
#include "tests/core/optim/optim_test_util.h"

namespace aiacc::optim {
namespace {

using ::testing::HasSubstr;
using testing::random_vector;

OptimizerOptions options_for(const std::string& type) {
  OptimizerOptions o;
  o.type = type;
  o.lr = 0.05;
  o.weight_decay = 0.2;
  o.momentum = 0.8;
  o.dampening = type == "sgd" ? 0.1 : 0.0;
  o.beta1 = 0.85;
  o.beta2 = 0.95;
  o.eps = 1e-3;
  o.initial_accumulator = 0.1;
  o.l1 = 0.01;
  o.l2 = 0.1;
  o.trust_coefficient = 0.02;
  if (type == "ftrl") o.weight_decay = 0.0;
  return o;
}

std::unique_ptr<Parameter> make_param(const std::string& name, std::size_t n, std::uint64_t seed,
                                      bool decays = true) {
  auto p = std::make_unique<Parameter>(
      name, Tensor::from_vector(random_vector(n, seed), Shape{static_cast<std::int64_t>(n)}));
  p->set_decays(decays);
  return p;
}

void set_grad(Parameter& p, std::uint64_t seed) {
  const auto g = random_vector(static_cast<std::size_t>(p.value().numel()), seed);
  std::copy(g.begin(), g.end(), p.grad().data<float>());
}

// What the optimizer must do for one parameter, written with the rules directly.
struct DirectStepper {
  OptimizerOptions o;
  std::vector<float> s0, s1;
  std::int64_t t = 0;
  DirectStepper(const OptimizerOptions& options, std::size_t n)
      : o(options),
        s0(n, options.type == "adagrad" ? static_cast<float>(options.initial_accumulator) : 0.0f),
        s1(n, 0.0f) {}
  void step(std::span<float> w, std::span<const float> g, bool decays, double lr) {
    ++t;
    const double wd = decays ? o.weight_decay : 0.0;
    if (o.type == "sgd") SgdRule{o.momentum, o.dampening, o.nesterov, wd}.update(w, g, s0, t, lr);
    if (o.type == "adam" || o.type == "adamw") {
      AdamRule{o.beta1, o.beta2, o.eps, wd, o.type == "adamw"}.update(w, g, s0, s1, t, lr);
    }
    if (o.type == "adagrad") AdagradRule{o.eps, wd, o.initial_accumulator}.update(w, g, s0, lr);
    if (o.type == "ftrl") FtrlRule{o.ftrl_beta, o.l1, o.l2}.update(w, g, s0, s1, lr);
    if (o.type == "lars") {
      const LarsRule rule{o.momentum, wd, o.trust_coefficient};
      const SquaredNorms n = rule.norms(w, g);
      const double trust =
          decays ? rule.trust_ratio(std::sqrt(n.weights), std::sqrt(n.other)) : 1.0;
      rule.update(w, g, s0, lr, trust);
    }
    if (o.type == "lamb") {
      const LambRule rule{o.beta1, o.beta2, o.eps, wd};
      const SquaredNorms n = rule.advance_moments(w, g, s0, s1, t);
      const double trust =
          decays ? rule.trust_ratio(std::sqrt(n.weights), std::sqrt(n.other)) : 1.0;
      rule.apply(w, s0, s1, t, lr, trust);
    }
  }
};

class OptimizerPerType : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerPerType, AppliesTheRuleToEveryParameter) {
  const OptimizerOptions o = options_for(GetParam());
  auto weight = make_param("fc.weight", 33, 1);
  auto bias = make_param("fc.bias", 7, 2, /*decays=*/false);
  std::vector<float> w_expected = weight->value().to_vector<float>();
  std::vector<float> b_expected = bias->value().to_vector<float>();
  DirectStepper w_direct(o, 33), b_direct(o, 7);
  Optimizer optimizer(o, {weight.get(), bias.get()});
  for (int t = 1; t <= 6; ++t) {
    set_grad(*weight, 10 + t);
    set_grad(*bias, 20 + t);
    const double lr = 0.05 / t;
    optimizer.step(lr);
    w_direct.step(w_expected, weight->grad().span<float>(), true, lr);
    b_direct.step(b_expected, bias->grad().span<float>(), false, lr);
  }
  EXPECT_EQ(optimizer.step_count(), 6);
  EXPECT_EQ(weight->value().to_vector<float>(), w_expected);  // bitwise: same float operations
  EXPECT_EQ(bias->value().to_vector<float>(), b_expected);
}

TEST_P(OptimizerPerType, StateRoundTripContinuesBitwise) {
  const OptimizerOptions o = options_for(GetParam());
  auto a = make_param("a", 40, 3);
  auto b = make_param("b", 9, 4, false);
  Optimizer first(o, {a.get(), b.get()});
  for (int t = 1; t <= 3; ++t) {
    set_grad(*a, 30 + t);
    set_grad(*b, 40 + t);
    first.step(0.05);
  }
  NamedTensors saved;
  for (const auto& [name, tensor] : first.state()) saved.emplace_back(name, tensor.clone());

  // A fresh process: same weights, a new optimizer, the saved state.
  auto a2 = make_param("a", 40, 0);
  auto b2 = make_param("b", 9, 0, false);
  a2->value().copy_from(a->value());
  b2->value().copy_from(b->value());
  Optimizer second(o, {a2.get(), b2.get()});
  second.load_state(saved);
  EXPECT_EQ(second.step_count(), 3);
  for (int t = 4; t <= 7; ++t) {
    set_grad(*a, 30 + t);
    set_grad(*b, 40 + t);
    set_grad(*a2, 30 + t);
    set_grad(*b2, 40 + t);
    first.step(0.05);
    second.step(0.05);
  }
  EXPECT_EQ(a->value().to_vector<float>(), a2->value().to_vector<float>());
  EXPECT_EQ(b->value().to_vector<float>(), b2->value().to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Types, OptimizerPerType,
                         ::testing::Values("sgd", "adam", "adamw", "adagrad", "ftrl", "lars",
                                           "lamb"));

std::vector<std::string> names_of(const NamedTensors& state) {
  std::vector<std::string> names;
  for (const auto& entry : state) names.push_back(entry.first);
  return names;
}

TEST(Optimizer, StateNames) {
  auto p = make_param("conv", 4, 5);
  using V = std::vector<std::string>;
  EXPECT_EQ(names_of(Optimizer(options_for("adam"), {p.get()}).state()),
            (V{"conv.exp_avg", "conv.exp_avg_sq", "step"}));
  EXPECT_EQ(names_of(Optimizer(options_for("sgd"), {p.get()}).state()),
            (V{"conv.momentum", "step"}));
  OptimizerOptions plain = options_for("sgd");
  plain.momentum = 0.0;
  plain.dampening = 0.0;
  EXPECT_EQ(names_of(Optimizer(plain, {p.get()}).state()), (V{"step"}));
  EXPECT_EQ(names_of(Optimizer(options_for("adagrad"), {p.get()}).state()),
            (V{"conv.sum", "step"}));
  EXPECT_EQ(names_of(Optimizer(options_for("ftrl"), {p.get()}).state()),
            (V{"conv.z", "conv.n", "step"}));
  const NamedTensors adagrad = Optimizer(options_for("adagrad"), {p.get()}).state();
  EXPECT_EQ(adagrad[0].second.to_vector<float>(),
            std::vector<float>(4, 0.1f));  // initial_accumulator
  EXPECT_EQ(adagrad[1].second.dtype(), DType::i64);
}

TEST(Optimizer, NonDecayingParametersGetNoDecayOrAdaptation) {
  // Zero gradients: any change comes from weight decay alone.
  for (const char* type : {"sgd", "adam", "adamw", "adagrad", "lars", "lamb"}) {
    auto decaying = make_param("w", 8, 6);
    auto exempt = make_param("b", 8, 7, false);
    const std::vector<float> exempt_before = exempt->value().to_vector<float>();
    Optimizer optimizer(options_for(type), {decaying.get(), exempt.get()});
    const std::vector<float> decaying_before = decaying->value().to_vector<float>();
    optimizer.step(0.1);
    EXPECT_EQ(exempt->value().to_vector<float>(), exempt_before) << type;
    EXPECT_NE(decaying->value().to_vector<float>(), decaying_before) << type;
  }
  // With a gradient, an exempt LARS parameter takes the unscaled momentum-SGD step lr*g.
  auto bias = make_param("b", 5, 8, false);
  const std::vector<float> before = bias->value().to_vector<float>();
  set_grad(*bias, 9);
  Optimizer lars(options_for("lars"), {bias.get()});
  lars.step(0.1);
  const std::vector<float> g = bias->grad().to_vector<float>();
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_FLOAT_EQ(bias->value().data<float>()[i], before[i] - 0.1f * g[i]) << i;
  }
}

TEST(Optimizer, LargeTensorsMatchFloat64LambReference) {
  // 100k elements span four chunks run in parallel; norms are summed across chunks.
  const std::size_t n = 100'000;
  const OptimizerOptions o = options_for("lamb");
  auto p = make_param("big", n, 11);
  std::vector<double> w(p->value().span<float>().begin(), p->value().span<float>().end());
  std::vector<double> m(n, 0.0), v(n, 0.0), u(n);
  Optimizer optimizer(o, {p.get()});
  for (int t = 1; t <= 3; ++t) {
    set_grad(*p, 50 + t);
    optimizer.step(o.lr);
    const std::span<const float> g = p->grad().span<float>();
    double w_sq = 0, u_sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
      u[i] = (m[i] / (1 - std::pow(o.beta1, t))) /
                 (std::sqrt(v[i] / (1 - std::pow(o.beta2, t))) + o.eps) +
             o.weight_decay * w[i];
      w_sq += w[i] * w[i];
      u_sq += u[i] * u[i];
    }
    for (std::size_t i = 0; i < n; ++i) w[i] -= o.lr * std::sqrt(w_sq / u_sq) * u[i];
  }
  testing::expect_close(p->value().to_vector<float>(), w, 1e-5, "lamb big");
}

TEST(Optimizer, LargeTensorsChunkedEqualsWholeSpan) {
  const std::size_t n = 70'001;  // not a multiple of the chunk size
  const OptimizerOptions o = options_for("adam");
  auto p = make_param("big", n, 12);
  std::vector<float> expected = p->value().to_vector<float>();
  DirectStepper direct(o, n);
  Optimizer optimizer(o, {p.get()});
  for (int t = 1; t <= 3; ++t) {
    set_grad(*p, 60 + t);
    optimizer.step(o.lr);
    direct.step(expected, p->grad().span<float>(), true, o.lr);
  }
  EXPECT_EQ(p->value().to_vector<float>(), expected);
}

TEST(Optimizer, ResultsDoNotDependOnThreadCount) {
  // Every rank must take the same step: layer norms are summed per fixed chunk, in chunk order.
  auto run = [](const std::string& type, int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    auto p = make_param("big", 150'000, 13);
    Optimizer optimizer(options_for(type), {p.get()});
    for (int t = 1; t <= 2; ++t) {
      set_grad(*p, 80 + t);
      optimizer.step(0.05);
    }
    omp_set_num_threads(saved);
    return p->value().to_vector<float>();
  };
  for (const char* type : {"lars", "lamb"}) EXPECT_EQ(run(type, 1), run(type, 3)) << type;
}

TEST(Optimizer, RejectsUnusableParameters) {
  Parameter sparse("emb", Tensor::zeros(Shape{0, 8}), ParamKind::sparse);
  EXPECT_THROW(Optimizer(options_for("sgd"), {&sparse}), InternalError);
  Parameter f64("x", Tensor::zeros(Shape{3}, DType::f64));
  EXPECT_THROW(Optimizer(options_for("sgd"), {&f64}), InternalError);
  auto a = make_param("same", 3, 1), b = make_param("same", 3, 2);
  EXPECT_THROW(Optimizer(options_for("sgd"), {a.get(), b.get()}), InternalError);
  OptimizerOptions bad = options_for("sgd");
  bad.type = "rmsprop";
  EXPECT_THROW(Optimizer(bad, {a.get()}), ConfigError);
}

TEST(Optimizer, LoadStateRejectsMismatchedCheckpoints) {
  auto p = make_param("p", 6, 1);
  Optimizer optimizer(options_for("adam"), {p.get()});
  set_grad(*p, 2);
  optimizer.step(0.1);
  const std::vector<float> exp_avg = optimizer.state()[0].second.to_vector<float>();
  auto error_of = [&](const NamedTensors& state) -> std::string {
    try {
      optimizer.load_state(state);
    } catch (const DataError& e) {
      return e.what();
    }
    return "<no DataError>";
  };
  const Tensor step = Tensor::from_vector<std::int64_t>({5}, Shape());
  const Tensor good = Tensor::zeros(Shape{6});
  EXPECT_THAT(error_of({{"p.exp_avg", good}, {"step", step}}),
              HasSubstr("'p.exp_avg_sq' is missing"));
  EXPECT_THAT(
      error_of({{"p.exp_avg", good}, {"p.exp_avg_sq", Tensor::zeros(Shape{5})}, {"step", step}}),
      HasSubstr("'p.exp_avg_sq': expected f32 [6]"));
  EXPECT_THAT(
      error_of({{"p.exp_avg", good}, {"p.exp_avg_sq", good}, {"p.momentum", good}, {"step", step}}),
      HasSubstr("'p.momentum' does not belong"));
  // Nothing was half-loaded.
  EXPECT_EQ(optimizer.state()[0].second.to_vector<float>(), exp_avg);
  EXPECT_EQ(optimizer.step_count(), 1);
  optimizer.load_state({{"p.exp_avg", good}, {"p.exp_avg_sq", good}, {"step", step}});
  EXPECT_EQ(optimizer.step_count(), 5);
  EXPECT_EQ(optimizer.state()[0].second.to_vector<float>(), std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace aiacc::optim
