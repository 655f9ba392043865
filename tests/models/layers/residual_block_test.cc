// ResidualBlock: finite-difference gradients in float64 through identity and projection
// shortcuts (the input gradient is the sum of both paths), the Layer contract (grad_ready once,
// gradients overwritten), parameter and buffer order, and shape-mismatch errors.
#include "models/layers/residual_block.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/layers/activation.h"
#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "tests/models/layers/dense_layer_check.h"

namespace aiacc::models {
namespace {

using testing::random_tensor;

// conv3x3(stride) -> bn -> relu -> conv3x3 -> bn, from `in` to `out` channels, f64.
std::unique_ptr<Sequential> basic_main(const std::string& prefix, std::int64_t in,
                                       std::int64_t out, int stride) {
  auto main = std::make_unique<Sequential>(prefix);
  main->add(std::make_unique<Conv2d>(prefix + ".conv1", in, out, 3, stride, 1, false, 11,
                                     DType::f64));
  main->add(std::make_unique<BatchNorm>(prefix + ".bn1", out, 0.1, 1e-5, DType::f64));
  main->add(std::make_unique<ReLU>(prefix + ".relu1"));
  main->add(std::make_unique<Conv2d>(prefix + ".conv2", out, out, 3, 1, 1, false, 12,
                                     DType::f64));
  main->add(std::make_unique<BatchNorm>(prefix + ".bn2", out, 0.1, 1e-5, DType::f64));
  return main;
}

std::unique_ptr<Sequential> projection(const std::string& prefix, std::int64_t in,
                                       std::int64_t out, int stride) {
  auto shortcut = std::make_unique<Sequential>(prefix + ".downsample");
  shortcut->add(std::make_unique<Conv2d>(prefix + ".downsample.0", in, out, 1, stride, 0, false,
                                         13, DType::f64));
  shortcut->add(std::make_unique<BatchNorm>(prefix + ".downsample.1", out, 0.1, 1e-5,
                                            DType::f64));
  return shortcut;
}

// Non-trivial batch-norm scales and shifts, so a path scaled by 1 and shifted by 0 cannot hide
// a missing term.
void randomise_norms(Layer& layer) {
  std::uint64_t seed = 100;
  for (Parameter* p : layer.parameters()) {
    const std::string& name = p->name();
    if (name.find(".bn") == std::string::npos && name.find("downsample.1") == std::string::npos) {
      continue;
    }
    const bool scale = name.ends_with(".weight");
    p->value().copy_from(random_tensor(p->value().shape(), seed++));
    if (scale) {
      for (double& v : p->value().span<double>()) v = 1.0 + 0.5 * v;
    }
  }
}

TEST(ResidualBlock, IdentityShortcutGradientsMatchFiniteDifferences) {
  ResidualBlock block("layer1.0", basic_main("layer1.0", 3, 3, 1), nullptr);
  randomise_norms(block);
  testing::expect_layer_gradients(block, random_tensor(Shape{2, 3, 5, 5}, 1));
}

TEST(ResidualBlock, ProjectionShortcutGradientsMatchFiniteDifferences) {
  ResidualBlock block("layer2.0", basic_main("layer2.0", 2, 4, 2), projection("layer2.0", 2, 4, 2));
  randomise_norms(block);
  testing::expect_layer_gradients(block, random_tensor(Shape{3, 2, 6, 5}, 2));
}

TEST(ResidualBlock, IdentityBlockOutputIsReluOfMainPlusInput) {
  // With both convolutions' weights zero the main path is bn2's shift: y = relu(x + beta).
  auto main = basic_main("b", 2, 2, 1);
  ResidualBlock block("b", std::move(main), nullptr);
  for (Parameter* p : block.parameters()) {
    if (p->name().ends_with("conv1.weight") || p->name().ends_with("conv2.weight")) {
      p->value().zero();
    }
    if (p->name() == "b.bn2.bias") p->value().copy_from(Tensor::from_vector<double>({0.5, -0.25}, {2}));
  }
  const Tensor x = random_tensor(Shape{2, 2, 3, 3}, 3);
  const Tensor y = block.forward(x, true);
  ASSERT_EQ(y.shape(), x.shape());
  const auto xs = x.span<double>();
  const auto ys = y.span<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double shift = (i / 9) % 2 == 0 ? 0.5 : -0.25;
    EXPECT_DOUBLE_EQ(ys[i], std::max(xs[i] + shift, 0.0)) << i;
  }
}

TEST(ResidualBlock, ListsMainPathThenShortcutAndFiresShortcutFirst) {
  ResidualBlock block("layer2.0", basic_main("layer2.0", 2, 4, 2), projection("layer2.0", 2, 4, 2));
  std::vector<std::string> names;
  for (Parameter* p : block.parameters()) names.push_back(p->name());
  const std::vector<std::string> expected = {
      "layer2.0.conv1.weight",       "layer2.0.bn1.weight", "layer2.0.bn1.bias",
      "layer2.0.conv2.weight",       "layer2.0.bn2.weight", "layer2.0.bn2.bias",
      "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
      "layer2.0.downsample.1.bias"};
  EXPECT_EQ(names, expected);
  std::vector<std::string> buffer_names;
  for (const auto& [name, tensor] : block.buffers()) buffer_names.push_back(name);
  ASSERT_EQ(buffer_names.size(), 9u);
  EXPECT_EQ(buffer_names.front(), "layer2.0.bn1.running_mean");
  EXPECT_EQ(buffer_names.back(), "layer2.0.downsample.1.num_batches_tracked");

  auto fired = std::make_shared<std::vector<std::string>>();
  for (Parameter* p : block.parameters()) {
    p->add_grad_ready_hook([fired](Parameter& param) { fired->push_back(param.name()); });
  }
  const Tensor y = block.forward(random_tensor(Shape{2, 2, 4, 4}, 4), true);
  block.backward(random_tensor(y.shape(), 5), /*need_input_grad=*/false);
  const std::vector<std::string> order = {
      "layer2.0.downsample.1.weight", "layer2.0.downsample.1.bias",
      "layer2.0.downsample.0.weight", "layer2.0.bn2.weight", "layer2.0.bn2.bias",
      "layer2.0.conv2.weight",        "layer2.0.bn1.weight", "layer2.0.bn1.bias",
      "layer2.0.conv1.weight"};
  EXPECT_EQ(*fired, order);
}

TEST(ResidualBlock, MismatchedPathsAreReported) {
  // A strided main path with an identity shortcut cannot be added.
  ResidualBlock block("layer2.0", basic_main("layer2.0", 2, 2, 2), nullptr);
  try {
    block.forward(random_tensor(Shape{2, 2, 4, 4}, 6), true);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("layer2.0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace aiacc::models
