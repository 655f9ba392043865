// Whole-network gradients of tiny ResNets in float64 (training-mode batch norm): backward
// against central differences for a random subset of every parameter's elements and of the
// input, grad_ready() once per parameter in reverse layer order, and overwritten gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/random.h"
#include "models/layers/loss.h"
#include "tests/models/resnet_test_util.h"

namespace aiacc::models {
namespace {

using aiacc::testing::gradients_close;
using testing::make_resnet;
using testing::random_batch;
using testing::resnet_options;

constexpr int kSampledElements = 6;  // per parameter: enough to catch a wrong term, fast
constexpr double kEps = 1e-6;

// Up to `count` distinct element indices of a tensor of `numel` elements, always including the
// first and the last.
std::vector<std::size_t> sample_indices(std::size_t numel, int count, std::uint64_t seed) {
  std::vector<std::size_t> picked = {0, numel - 1};
  Rng rng(seed, 3);
  while (static_cast<int>(picked.size()) < std::min<int>(count, static_cast<int>(numel))) {
    const std::size_t i = rng.below(numel);
    if (std::find(picked.begin(), picked.end(), i) == picked.end()) picked.push_back(i);
  }
  picked.resize(std::min<std::size_t>(picked.size(), numel));
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  return picked;
}

// Central differences of `loss` for the elements `indices` of `x` (perturbed and restored).
std::vector<double> numeric_at(const std::function<double()>& loss, std::span<double> x,
                               const std::vector<std::size_t>& indices) {
  std::vector<double> result;
  for (std::size_t i : indices) {
    const double saved = x[i];
    x[i] = saved + kEps;
    const double plus = loss();
    x[i] = saved - kEps;
    const double minus = loss();
    x[i] = saved;
    result.push_back((plus - minus) / (2 * kEps));
  }
  return result;
}

// Batch-norm scales around 1 and shifts around 0 instead of exactly 1 and 0, so a branch that
// is dropped or counted twice cannot hide behind a neutral value.
void randomise_norms(Model& model) {
  std::uint64_t stream = 0;
  for (Parameter* p : model.parameters()) {
    const std::string& n = p->name();
    const bool norm = n.find("bn") != std::string::npos || n.find("downsample.1") != std::string::npos;
    if (!norm) continue;
    Rng rng(99, stream++);
    const bool scale = n.ends_with(".weight");
    for (double& v : p->value().span<double>()) {
      v = scale ? rng.uniform(0.6, 1.4) : rng.uniform(-0.3, 0.3);
    }
  }
}

// "layer2.0.downsample.1.weight" -> "layer2.0.downsample.1": the layer a parameter belongs to.
std::string layer_of(const std::string& name) { return name.substr(0, name.rfind('.')); }

std::vector<std::string> layers_in_order(const std::vector<std::string>& names) {
  std::vector<std::string> layers;
  for (const auto& n : names) {
    if (layers.empty() || layers.back() != layer_of(n)) layers.push_back(layer_of(n));
  }
  return layers;
}

void expect_model_gradients(const ResNet::Options& options, const Shape& example,
                            std::int64_t batch_size) {
  constexpr std::int64_t kClasses = 3;
  auto model = make_resnet(options, example, kClasses, DType::f64, 21);
  randomise_norms(*model);
  const Batch batch = random_batch(batch_size, example, kClasses, DType::f64, 5);
  auto loss = [&] { return model->forward(batch, /*training=*/true); };

  std::map<std::string, int> fired_count;
  auto fired = std::make_shared<std::vector<std::string>>();
  std::vector<std::string> forward_names;
  for (Parameter* p : model->parameters()) {
    forward_names.push_back(p->name());
    p->add_grad_ready_hook([fired](Parameter& param) { fired->push_back(param.name()); });
  }

  loss();
  model->backward();
  for (const auto& name : *fired) ++fired_count[name];
  for (const auto& name : forward_names) EXPECT_EQ(fired_count[name], 1) << name;
  EXPECT_EQ(fired->size(), forward_names.size());
  // Layers complete in exactly the reverse of their forward order (the order fused gradient
  // buckets are laid out in).
  auto reversed = layers_in_order(forward_names);
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(layers_in_order(*fired), reversed);

  std::map<std::string, std::vector<double>> analytic;
  for (Parameter* p : model->parameters()) analytic[p->name()] = p->grad().to_vector<double>();

  std::uint64_t seed = 1;
  for (Parameter* p : model->parameters()) {
    const auto indices = sample_indices(p->value().numel(), kSampledElements, seed++);
    std::vector<double> picked;
    for (std::size_t i : indices) picked.push_back(analytic[p->name()][i]);
    EXPECT_TRUE(gradients_close(picked, numeric_at(loss, p->value().span<double>(), indices)))
        << p->name();
  }

  // The input gradient, through the layers (Model::backward() does not compute it): the
  // same network and loss, differentiated down to the images.
  SoftmaxCrossEntropy cross_entropy;
  auto network_loss = [&] {
    return cross_entropy.forward(model->network().forward(batch.inputs, true), batch.labels);
  };
  network_loss();
  const Tensor dx = model->network().backward(cross_entropy.backward(), /*need_input_grad=*/true);
  ASSERT_EQ(dx.shape(), batch.inputs.shape());
  const auto input_indices = sample_indices(batch.inputs.numel(), 4 * kSampledElements, 77);
  std::vector<double> picked;
  for (std::size_t i : input_indices) picked.push_back(dx.span<double>()[i]);
  EXPECT_TRUE(gradients_close(picked,
                              numeric_at(network_loss, batch.inputs.span<double>(), input_indices)))
      << "input gradient";
  EXPECT_EQ(fired->size(), 2 * forward_names.size());

  // A second forward/backward on the same batch overwrites, not accumulates. The batch norms'
  // running statistics moved, but training mode normalises with batch statistics, so the
  // gradients must be the same.
  loss();
  model->backward();
  for (Parameter* p : model->parameters()) {
    EXPECT_TRUE(gradients_close(p->grad().to_vector<double>(), analytic[p->name()], 1e-10, 1e-13))
        << p->name() << ": second backward changed the gradient (accumulated?)";
  }
  EXPECT_EQ(fired->size(), 3 * forward_names.size());
}

TEST(ResNetGradients, BasicBlockNetMatchesFiniteDifferences) {
  // Depth 8: stem + one basic block per stage; stages 2 and 3 have projection shortcuts.
  expect_model_gradients(resnet_options(8, 4), Shape{2, 8, 8}, 3);
}

TEST(ResNetGradients, BottleneckNetWithImagenetStemMatchesFiniteDifferences) {
  // Depth 11 bottleneck: every block projects (channels x4); the 7x7/2 stem and max-pool too.
  ResNet::Options options = resnet_options(11, 2);
  options.block = "bottleneck";
  options.stem = "imagenet";
  expect_model_gradients(options, Shape{3, 16, 16}, 2);
}

}  // namespace
}  // namespace aiacc::models
