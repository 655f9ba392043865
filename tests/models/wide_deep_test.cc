// wide_deep: parameters named per table, float64 finite-difference gradients (dense parameters,
// pulled embedding rows, integer features), grad_ready once per parameter, no pushes by the model,
// field-salted hashing and configuration errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "core/config/node.h"
#include "core/error.h"
#include "models/wide_deep_model.h"
#include "tests/models/wide_deep_test_util.h"
#include "tests/testing/fake_device.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::KeepingFactory;
using testing::RecordingStore;

InputSpec ctr_spec(std::vector<std::string> fields, std::int64_t num_int) {
  InputSpec spec;
  spec.task = Task::binary;
  spec.example_shape = Shape{num_int};
  spec.sparse_fields = std::move(fields);
  return spec;
}

std::unique_ptr<Model> build(const std::string& yaml, const ModelContext& context) {
  const auto doc = config::Document::from_string(yaml, "model.yaml");
  return model_registry().create("wide_deep", doc.root(), context);
}

// 5 examples over C1..C3 with a repeated id in a bag, an empty bag, shared ids and a missing (-1).
Batch small_batch() {
  const std::vector<float> ints = testing::random_floats(5 * 2, 17);
  return testing::ctr_batch({{{1}, {2}, {1}, {3}, {-1}},
                             {{1}, {7, 7}, {8, 9}, {}, {1}},
                             {{5}, {5}, {5}, {6}, {6}}},
                            ints, 2, {1, 0, 1, 0, 1});
}

constexpr const char* kSmallModel =
    "embedding_dim: 3\nhidden: [4, 3]\ncross_features: [C1_x_C2]\n"
    "init_scale: 0.3\nwide_init_scale: 0.1\n";

TEST(WideDeep, ParametersAreNamedPerTable) {
  KeepingFactory keep{testing::recording_factory()};
  ModelContext context{ctr_spec({"C1", "C2", "C3"}, 2), 3, DType::f32, keep.factory(), {}};
  auto model = build(kSmallModel, context);
  std::vector<std::string> names;
  for (Parameter* p : model->parameters()) names.push_back(p->name());
  EXPECT_THAT(names, ElementsAre("wide.C1", "wide.C2", "wide.C3", "wide.C1_x_C2", "wide.dense.weight",
                                 "wide.bias", "deep.C1", "deep.C2", "deep.C3", "deep.fc1.weight",
                                 "deep.fc1.bias", "deep.fc2.weight", "deep.fc2.bias",
                                 "deep.fc3.weight", "deep.fc3.bias"));
  std::set<std::uint64_t> seeds;
  for (Parameter* p : model->parameters()) {
    const bool is_table = keep.stores.count(p->name()) > 0;
    EXPECT_EQ(p->kind() == ParamKind::sparse, is_table) << p->name();
    if (!is_table) continue;
    const EmbeddingTableSpec& spec = keep.stores.at(p->name())->spec();
    const bool wide = p->name().starts_with("wide.");
    EXPECT_EQ(spec.dim, wide ? 1 : 3) << p->name();
    EXPECT_EQ(spec.init_scale, wide ? 0.1 : 0.3) << p->name();
    EXPECT_EQ(p->value().shape(), Shape({0, spec.dim})) << p->name();
    seeds.insert(spec.seed);
  }
  EXPECT_EQ(keep.stores.size(), 7u);
  EXPECT_EQ(seeds.size(), 7u);  // every table starts from its own rows

  // wide only: the logistic-regression baseline has no deep tables and no MLP.
  KeepingFactory lr_keep{testing::recording_factory()};
  ModelContext lr_context{ctr_spec({"C1", "C2", "C3"}, 2), 3, DType::f32, lr_keep.factory(), {}};
  auto lr = build("deep: false\n", lr_context);
  names.clear();
  for (Parameter* p : lr->parameters()) names.push_back(p->name());
  EXPECT_THAT(names, ElementsAre("wide.C1", "wide.C2", "wide.C3", "wide.dense.weight", "wide.bias"));
}

TEST(WideDeep, Float64GradientsMatchFiniteDifferences) {
  KeepingFactory keep{testing::recording_factory()};
  ModelContext context{ctr_spec({"C1", "C2", "C3"}, 2), 3, DType::f64, keep.factory(), {}};
  auto model = build(kSmallModel, context);
  auto* wide_deep = dynamic_cast<WideDeep*>(model.get());
  ASSERT_NE(wide_deep, nullptr);
  wide_deep->set_compute_input_grad(true);
  Batch batch = small_batch();
  auto loss = [&] { return model->forward(batch, /*training=*/false); };

  loss();
  EXPECT_EQ(model->outputs().dtype(), DType::f64);
  model->backward();
  const std::vector<double> input_grad = wide_deep->input_grad().to_vector<double>();

  // Pulled rows are floats in the store: perturb them by a power of two that is exact in float
  // (rows are below 1, so their ulp divides 2^-12), so the float64 model sees exactly x +- h.
  const double h = std::ldexp(1.0, -12);
  auto exact_difference = [&](float& x) {
    const float original = x;
    x = static_cast<float>(original + h);
    EXPECT_EQ(static_cast<double>(x) - original, h);
    const double up = loss();
    x = static_cast<float>(original - h);
    EXPECT_EQ(original - static_cast<double>(x), h);
    const double down = loss();
    x = original;
    return (up - down) / (2 * h);
  };

  int checked_tables = 0;
  for (Parameter* p : model->parameters()) {
    if (p->kind() == ParamKind::dense) {
      const std::vector<double> analytic = p->grad().to_vector<double>();
      const std::vector<double> numeric = testing::numeric_gradient(loss, p->value().span<double>());
      EXPECT_TRUE(testing::gradients_close(analytic, numeric, 1e-5, 1e-8)) << p->name();
      continue;
    }
    auto store = std::dynamic_pointer_cast<RecordingStore>(keep.stores.at(p->name()));
    const SparseGrad grad = p->sparse_grad();
    const auto dim = store->spec().dim;
    ASSERT_EQ(grad.rows.shape(), Shape({static_cast<std::int64_t>(grad.ids.size()), dim}));
    const std::vector<double> analytic = grad.rows.to_vector<double>();
    std::vector<double> numeric;
    for (std::int64_t id : grad.ids) {
      for (std::int64_t j = 0; j < dim; ++j) numeric.push_back(exact_difference(store->row(id)[j]));
    }
    EXPECT_TRUE(testing::gradients_close(analytic, numeric, 1e-5, 1e-8)) << p->name();
    ++checked_tables;
  }
  EXPECT_EQ(checked_tables, 7);

  std::vector<double> numeric_inputs;
  for (float& x : batch.inputs.span<float>()) numeric_inputs.push_back(exact_difference(x));
  EXPECT_TRUE(testing::gradients_close(input_grad, numeric_inputs, 1e-5, 1e-8));
}

TEST(WideDeep, GradReadyOncePerParameterAndNoPushes) {
  KeepingFactory keep{testing::recording_factory()};
  ModelContext context{ctr_spec({"C1", "C2", "C3"}, 2), 3, DType::f32, keep.factory(), {}};
  auto model = build(std::string(kSmallModel) + "dropout: 0.2\n", context);
  std::map<std::string, int> fired;
  for (Parameter* p : model->parameters()) {
    p->add_grad_ready_hook([&fired](Parameter& param) { ++fired[param.name()]; });
  }
  const Batch batch = small_batch();
  for (int step = 1; step <= 2; ++step) {
    const double loss = model->forward(batch, /*training=*/true);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(model->outputs().shape(), Shape({5}));
    model->backward();
    for (Parameter* p : model->parameters()) {
      EXPECT_EQ(fired[p->name()], step) << p->name();
      if (p->kind() != ParamKind::sparse) continue;
      const SparseGrad& grad = p->sparse_grad();
      const std::set<std::int64_t> unique(grad.ids.begin(), grad.ids.end());
      EXPECT_EQ(unique.size(), grad.ids.size()) << p->name();
      EXPECT_EQ(p->value().dim(0), static_cast<std::int64_t>(grad.ids.size())) << p->name();
      EXPECT_EQ(grad.rows.dtype(), DType::f32);
    }
  }
  EXPECT_EQ(fired.size(), model->parameters().size());
  // deep.C2's batch ids: 1, 7 (twice in one bag), 8, 9 and 1 again -> 4 unique rows.
  EXPECT_EQ(keep.stores.size(), 7u);
  for (const auto& [name, store] : keep.stores) {
    auto* recording = dynamic_cast<RecordingStore*>(store.get());
    EXPECT_EQ(recording->pushes, 0) << name;  // the trainer pushes, never the model
    EXPECT_EQ(recording->pulls, 2) << name;   // one pull per table per forward
  }
}

// On a device (the fake accelerator: the CPU kernels over "device" memory) the model computes
// what it computes on the CPU, bit for bit, whether the deep tables' bags are pooled on the
// device (their unique rows, indices and backward plans copied over, the pooled rows written
// into the MLP's input in place) or on the host: outputs, the loss, every table's gradient
// rows, the dense gradients and the integer features' gradient; each parameter's grad_ready
// fires once a step, and the bag ops run exactly when the bags are on the device. Sum and mean
// pooling, an empty bag, a repeated id, no integer features, the wide part off, a field whose
// bags are all empty, and the input gradient not asked for.
TEST(WideDeep, OnADeviceEitherPlaceOfTheBagsGivesTheCpuResults) {
  testing::FakeDeviceLog& log = testing::install_fake_device();
  struct Case {
    std::string name, yaml;
    std::int64_t num_int = 2;
    bool input_grad = true;
    bool empty_field = false;  // C3's bags all empty
  };
  const std::vector<Case> cases = {
      {"sum", "pooling: sum\n"},
      {"mean", "pooling: mean\n"},
      {"no integers", "pooling: sum\n", 0},
      {"deep only", "wide: false\n"},
      {"an empty field", "pooling: mean\n", 2, true, true},
      {"no input gradient", "pooling: sum\n", 2, false},
  };
  for (const Case& c : cases) {
    Batch batch = small_batch();
    if (c.num_int == 0) batch.inputs = Tensor::zeros(Shape{5, 0});
    if (c.empty_field) batch.sparse[2] = SparseField{{}, {0, 0, 0, 0, 0, 0}};
    struct Run {
      std::vector<double> losses;
      std::vector<std::vector<float>> outputs, grads, input_grads;
    };
    const auto run = [&](const std::string& bags, Device device) {
      KeepingFactory keep{testing::recording_factory()};
      ModelContext context{ctr_spec({"C1", "C2", "C3"}, c.num_int), 3, DType::f32, keep.factory(), {}};
      // The deep-only model has no crosses (they belong to the wide part).
      const std::string base = c.name == "deep only" ? "embedding_dim: 3\nhidden: [4, 3]\ninit_scale: 0.3\n"
                                                     : std::string(kSmallModel);
      auto model = build(base + c.yaml + "embedding_bags: " + bags + "\n", context);
      model->to(device);
      dynamic_cast<WideDeep&>(*model).set_compute_input_grad(c.input_grad);
      std::map<std::string, int> fired;
      for (Parameter* p : model->parameters()) {
        p->add_grad_ready_hook([&fired](Parameter& param) { ++fired[param.name()]; });
      }
      Run out;
      for (int step = 1; step <= 2; ++step) {
        out.losses.push_back(model->forward(batch, /*training=*/true));
        out.outputs.push_back(model->outputs().to_vector<float>());
        model->backward();
        for (Parameter* p : model->parameters()) {
          EXPECT_EQ(fired[p->name()], step) << p->name() << " with bags on the " << bags << ", " << c.name;
          const Tensor grad = p->kind() == ParamKind::sparse ? p->sparse_grad().rows : p->grad();
          out.grads.push_back(grad.to(Device::cpu()).to_vector<float>());
        }
        if (c.input_grad) out.input_grads.push_back(dynamic_cast<WideDeep&>(*model).input_grad().to_vector<float>());
      }
      return out;
    };
    const Run cpu = run("device", Device::cpu());
    for (const std::string bags : {"device", "host"}) {
      const int bag_ops_before = log.bag_ops;
      const Run device = run(bags, Device::cuda(0));
      if (bags == "device") {
        EXPECT_GT(log.bag_ops, bag_ops_before) << c.name;
      } else {
        EXPECT_EQ(log.bag_ops, bag_ops_before) << c.name;
      }
      EXPECT_EQ(device.losses, cpu.losses) << c.name << ", bags on the " << bags;
      EXPECT_EQ(device.outputs, cpu.outputs) << c.name << ", bags on the " << bags;
      EXPECT_EQ(device.grads, cpu.grads) << c.name << ", bags on the " << bags;
      EXPECT_EQ(device.input_grads, cpu.input_grads) << c.name << ", bags on the " << bags;
    }
  }
}

TEST(WideDeep, HashingSeparatesFieldsAndCrosses) {
  const std::vector<std::string> fields = {"origin", "dest"};
  const FeatureHasher hasher(fields, parse_cross_features({"origin_x_dest"}, fields), 0);
  EXPECT_NE(hasher.field_id(0, 5), hasher.field_id(1, 5));
  EXPECT_NE(hasher.field_id(0, -1), hasher.field_id(1, -1));
  // The salt follows the field's name, not its position.
  const FeatureHasher swapped({"dest", "origin"}, {}, 0);
  EXPECT_EQ(hasher.field_id(0, 5), swapped.field_id(1, 5));

  // A batch where both fields hold the same raw values: no id is shared, and the cross of
  // (1, 2) differs from the cross of (2, 1).
  const Batch batch = testing::ctr_batch({{{1}, {2}, {-1}}, {{2}, {1}, {-1}}}, {0, 0, 0}, 1, {0, 1, 0});
  std::vector<SparseField> ids;
  std::vector<SparseField> crosses;
  hasher.hash(batch.sparse, 3, ids, crosses);
  const std::set<std::int64_t> origin(ids[0].ids.begin(), ids[0].ids.end());
  for (std::int64_t id : ids[1].ids) EXPECT_EQ(origin.count(id), 0u);
  ASSERT_EQ(crosses[0].ids.size(), 3u);
  EXPECT_NE(crosses[0].ids[0], crosses[0].ids[1]);

  // Folded ids stay inside the buckets.
  const FeatureHasher folded(fields, {}, 1000);
  folded.hash(batch.sparse, 3, ids, crosses);
  for (const SparseField& f : ids) {
    for (std::int64_t id : f.ids) EXPECT_TRUE(id >= 0 && id < 1000);
  }
  // Multi-hot crosses pair every id of one field with every id of the other.
  const Batch multi = testing::ctr_batch({{{1, 2}}, {{3, 4, 5}}}, {0}, 1, {1});
  hasher.hash(multi.sparse, 1, ids, crosses);
  EXPECT_EQ(crosses[0].ids.size(), 6u);
  EXPECT_THAT(crosses[0].offsets, ElementsAre(0, 6));
}

TEST(WideDeep, ReportsBadConfigurationsAndBatches) {
  ModelContext context{ctr_spec({"C1", "C2"}, 2), 3, DType::f32, testing::recording_factory(), {}};
  try {
    build("cross_features: [C1_x_C9]\n", context);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("C1_x_C9"));
    EXPECT_THAT(e.what(), HasSubstr("C2"));
  }
  EXPECT_THROW(build("wide: false\ndeep: false\n", context), ConfigError);
  EXPECT_THROW(build("pooling: max\n", context), ConfigError);

  ModelContext no_stores{ctr_spec({"C1"}, 2), 3, DType::f32, nullptr, {}};
  EXPECT_THROW(build("", no_stores), ConfigError);
  ModelContext images = context;
  images.input.task = Task::classification;
  EXPECT_THROW(build("", images), ConfigError);

  auto model = build("hidden: [4]\n", context);
  const Batch one_field = testing::ctr_batch({{{1}}}, {0, 0}, 2, {1});
  EXPECT_THROW(model->forward(one_field, true), DataError);
  const Batch wrong_ints = testing::ctr_batch({{{1}}, {{2}}}, {0, 0, 0}, 3, {1});
  EXPECT_THROW(model->forward(wrong_ints, true), DataError);
}

}  // namespace
}  // namespace aiacc::models
