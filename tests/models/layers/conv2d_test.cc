// Conv2d layer: parameters and initialisation, forward against the naive reference, gradients
// through the layer against finite differences, the backward contract and shape errors.
#include "models/layers/conv2d.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tests/core/kernels/dense_reference.h"
#include "tests/models/layers/dense_layer_check.h"

namespace aiacc::models {
namespace {

using testing::expect_layer_gradients;
using testing::random_tensor;

TEST(Conv2dLayer, ParametersAndDeterministicInitialisation) {
  Conv2d layer("conv1", 3, 8, /*kernel=*/3, /*stride=*/1, /*padding=*/1, /*bias=*/true, 7);
  ASSERT_EQ(layer.parameters().size(), 2u);
  EXPECT_EQ(layer.parameters()[0]->name(), "conv1.weight");
  EXPECT_EQ(layer.parameters()[1]->name(), "conv1.bias");
  EXPECT_EQ(layer.weight().value().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_FALSE(layer.bias()->decays());
  const float bound = 1.0f / std::sqrt(27.0f);
  for (float v : layer.weight().value().span<float>()) EXPECT_LE(std::abs(v), bound);
  Conv2d same("conv1", 3, 8, 3, 1, 1, true, 7);
  EXPECT_EQ(layer.weight().value().to_vector<float>(), same.weight().value().to_vector<float>());
  Conv2d no_bias("conv1", 3, 8, 3, 1, 1, false, 7);
  EXPECT_EQ(no_bias.parameters().size(), 1u);
}

TEST(Conv2dLayer, ForwardMatchesNaiveReference) {
  Conv2d layer("conv", 3, 5, 3, 2, 1, true, 11);
  const Tensor x = random_tensor(Shape{2, 3, 9, 7}, 1, DType::f32);
  const Tensor y = layer.forward(x, false);
  ASSERT_EQ(y.shape(), (Shape{2, 5, 5, 4}));
  const kernels::Conv2dGeometry g{2, 3, 9, 7, 5, 3, 3, 2, 2, 1, 1};
  const auto expected = aiacc::testing::reference::conv2d_forward(
      g, x.data<float>(), layer.weight().value().data<float>(),
      layer.bias()->value().data<float>());
  EXPECT_TRUE(aiacc::testing::reference::all_close(y.to_vector<float>(), expected, 1e-5, 1e-5));
}

TEST(Conv2dLayer, GradientsMatchFiniteDifferences) {
  {
    SCOPED_TRACE("3x3, stride 2, padding 1, bias");
    Conv2d layer("conv", 2, 3, 3, 2, 1, true, 5, DType::f64);
    expect_layer_gradients(layer, random_tensor(Shape{2, 2, 7, 6}, 2));
  }
  {
    SCOPED_TRACE("1x1 pointwise, no bias, batch 1");
    Conv2d layer("conv", 4, 3, 1, 1, 0, false, 6, DType::f64);
    expect_layer_gradients(layer, random_tensor(Shape{1, 4, 3, 5}, 3));
  }
}

TEST(Conv2dLayer, RejectsMismatchedInputs) {
  Conv2d layer("stem", 3, 4, 3, 1, 0, true, 1);
  try {
    layer.forward(Tensor::zeros(Shape{2, 1, 8, 8}), true);
    FAIL() << "expected InternalError";
  } catch (const InternalError& error) {
    EXPECT_NE(std::string(error.what()).find("stem"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[2, 1, 8, 8]"), std::string::npos) << error.what();
  }
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{2, 3, 2, 8}), true), InternalError);  // too small
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{3, 8, 8}), true), InternalError);
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{1, 3, 8, 8}, DType::f64), true), InternalError);
  layer.forward(Tensor::zeros(Shape{2, 3, 8, 8}), true);
  EXPECT_THROW(layer.backward(Tensor::zeros(Shape{2, 4, 8, 8})), InternalError);
  EXPECT_NO_THROW(layer.backward(Tensor::zeros(Shape{2, 4, 6, 6})));
  EXPECT_THROW(Conv2d("bad", 3, 4, 0, 1, 0, true, 1), InternalError);
}

}  // namespace
}  // namespace aiacc::models
