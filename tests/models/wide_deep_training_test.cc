// wide_deep learns: a short training run on synthetic CTR data from a known logistic teacher,
// with the sparse rows pushed to LocalEmbeddingStores from the grad-ready hooks (as the trainer
// does) and the dense parameters stepped by optim::Optimizer, reaches a test AUC near the
// teacher's (the best achievable).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/config/node.h"
#include "core/embedding/local_embedding_store.h"
#include "core/optim/optimizer.h"
#include "models/model.h"
#include "tests/models/wide_deep_test_util.h"

namespace aiacc::models {
namespace {

constexpr int kFields = 4;
constexpr int kVocabulary = 50;
constexpr int kInts = 2;

struct Data {
  std::vector<std::vector<std::int64_t>> raw;  // [N][kFields] raw categorical values
  std::vector<float> ints;                     // [N, kInts]
  std::vector<float> labels;                   // [N]
  std::vector<double> teacher;                 // [N] the teacher's probability
};

// Raw values look like Criteo's: random 32-bit values, one vocabulary per field (some shared
// between fields on purpose: hashing must keep them apart).
Data make_data(int count, std::uint64_t seed) {
  Rng teacher_rng(1234);  // the same teacher for train and test
  std::vector<std::vector<double>> weight(kFields, std::vector<double>(kVocabulary));
  std::vector<std::int64_t> values(kVocabulary);
  for (auto& v : values) v = static_cast<std::int64_t>(teacher_rng.next() >> 32);
  for (auto& field : weight) {
    for (double& w : field) w = 0.8 * teacher_rng.normal();
  }
  Data data;
  Rng rng(seed);
  for (int i = 0; i < count; ++i) {
    double logit = -0.5;
    std::vector<std::int64_t> row(kFields);
    for (int f = 0; f < kFields; ++f) {
      const auto v = rng.below(kVocabulary);
      row[f] = values[v];
      logit += weight[f][v];
    }
    const auto x0 = static_cast<float>(rng.normal());
    const auto x1 = static_cast<float>(rng.uniform());
    logit += 0.7 * x0 - 1.0 * x1;
    const double p = 1.0 / (1.0 + std::exp(-logit));
    data.raw.push_back(row);
    data.ints.insert(data.ints.end(), {x0, x1});
    data.labels.push_back(rng.uniform() < p ? 1.0f : 0.0f);
    data.teacher.push_back(p);
  }
  return data;
}

Batch batch_of(const Data& data, int begin, int end) {
  std::vector<std::vector<std::vector<std::int64_t>>> fields(kFields);
  for (int i = begin; i < end; ++i) {
    for (int f = 0; f < kFields; ++f) fields[f].push_back({data.raw[i][f]});
  }
  return testing::ctr_batch(
      fields, std::vector<float>(data.ints.begin() + begin * kInts, data.ints.begin() + end * kInts),
      kInts, std::vector<float>(data.labels.begin() + begin, data.labels.begin() + end));
}

// Area under the ROC curve by the rank-sum statistic (ties share their average rank).
double auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return scores[a] < scores[b]; });
  double positive_ranks = 0.0;
  double positives = 0.0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // average of ranks i+1 .. j
    for (std::size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_ranks += rank;
        positives += 1.0;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

double train_and_evaluate(const std::string& yaml, const Data& train, const Data& test) {
  optim::OptimizerOptions sparse;
  sparse.type = "adagrad";
  sparse.lr = 0.1;
  sparse.initial_accumulator = 0.0;  // PyTorch's default
  testing::KeepingFactory keep{local_embedding_store_factory(sparse)};
  InputSpec input;
  input.task = Task::binary;
  input.example_shape = Shape{kInts};
  for (int f = 1; f <= kFields; ++f) input.sparse_fields.push_back(fmt::format("C{}", f));
  const ModelContext context{input, 5, DType::f32, keep.factory(), {}};
  auto model =
      model_registry().create("wide_deep", config::Document::from_string(yaml, "m.yaml").root(), context);

  // What the trainer does: push each sparse gradient when it is ready; step dense params after.
  std::vector<Parameter*> dense;
  for (Parameter* p : model->parameters()) {
    if (p->kind() == ParamKind::dense) {
      dense.push_back(p);
      continue;
    }
    std::shared_ptr<EmbeddingStore> store = keep.stores.at(p->name());
    p->add_grad_ready_hook([store, lr = sparse.lr](Parameter& param) {
      const SparseGrad& grad = param.sparse_grad();
      store->push(grad.ids, grad.rows.data<float>(), lr);
    });
  }
  optim::OptimizerOptions dense_options;
  dense_options.type = "adam";
  dense_options.lr = 0.005;
  optim::Optimizer optimizer(dense_options, dense);

  constexpr int kBatch = 128;
  const int n = static_cast<int>(train.labels.size());
  for (int epoch = 0; epoch < 4; ++epoch) {
    for (int begin = 0; begin + kBatch <= n; begin += kBatch) {
      model->forward(batch_of(train, begin, begin + kBatch), /*training=*/true);
      model->backward();
      optimizer.step(dense_options.lr);
    }
  }
  std::vector<double> scores;
  const int m = static_cast<int>(test.labels.size());
  for (int begin = 0; begin < m; begin += 500) {
    model->forward(batch_of(test, begin, std::min(m, begin + 500)), /*training=*/false);
    for (float logit : model->outputs().span<float>()) scores.push_back(logit);
  }
  return auc(scores, test.labels);
}

TEST(WideDeepTraining, ReachesTeacherLikeAucOnSyntheticCtr) {
  const Data train = make_data(6000, 1);
  const Data test = make_data(2000, 2);
  const double best = auc(test.teacher, test.labels);
  const double wide_deep = train_and_evaluate(
      "embedding_dim: 8\nhidden: [32, 16]\ncross_features: [C1_x_C2]\n", train, test);
  const double logistic = train_and_evaluate("deep: false\n", train, test);
  std::printf("[ auc      ] teacher %.4f, wide_deep %.4f, wide only (logistic regression) %.4f\n",
              best, wide_deep, logistic);
  EXPECT_GT(best, 0.75);
  EXPECT_GT(wide_deep, 0.70);
  EXPECT_GT(wide_deep, best - 0.05);
  EXPECT_GT(logistic, best - 0.05);
}

}  // namespace
}  // namespace aiacc::models
