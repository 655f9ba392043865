// Linear layer: parameters and initialisation, forward against the naive reference, gradients
// through the layer against finite differences, the backward contract and shape errors.
#include "models/layers/linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tests/core/kernels/dense_reference.h"
#include "tests/models/layers/dense_layer_check.h"

namespace aiacc::models {
namespace {

using testing::expect_layer_gradients;
using testing::random_tensor;

TEST(LinearLayer, ParametersAndDeterministicInitialisation) {
  Linear layer("fc1", 20, 7, /*bias=*/true, /*seed=*/42);
  ASSERT_EQ(layer.parameters().size(), 2u);
  EXPECT_EQ(layer.parameters()[0]->name(), "fc1.weight");
  EXPECT_EQ(layer.parameters()[1]->name(), "fc1.bias");
  EXPECT_EQ(layer.weight().value().shape(), (Shape{7, 20}));
  EXPECT_EQ(layer.bias()->value().shape(), (Shape{7}));
  EXPECT_TRUE(layer.weight().decays());
  EXPECT_FALSE(layer.bias()->decays());
  EXPECT_EQ(layer.weight().value().dtype(), DType::f32);
  EXPECT_EQ(layer.name(), "fc1");

  const float bound = 1.0f / std::sqrt(20.0f);
  for (float v : layer.weight().value().span<float>()) {
    EXPECT_LE(std::abs(v), bound);
  }
  Linear same("fc1", 20, 7, true, 42), other("fc1", 20, 7, true, 43),
      no_bias("x", 20, 7, false, 42);
  EXPECT_EQ(layer.weight().value().to_vector<float>(), same.weight().value().to_vector<float>());
  EXPECT_EQ(layer.bias()->value().to_vector<float>(), same.bias()->value().to_vector<float>());
  EXPECT_NE(layer.weight().value().to_vector<float>(), other.weight().value().to_vector<float>());
  EXPECT_EQ(layer.weight().value().to_vector<float>(), no_bias.weight().value().to_vector<float>());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  EXPECT_EQ(no_bias.bias(), nullptr);
}

TEST(LinearLayer, ForwardMatchesNaiveReference) {
  Linear layer("fc", 13, 5, true, 3);
  const Tensor x = random_tensor(Shape{9, 13}, 1, DType::f32);
  const Tensor y = layer.forward(x, false);
  ASSERT_EQ(y.shape(), (Shape{9, 5}));
  const auto expected = aiacc::testing::reference::linear(9, 13, 5, x.data<float>(),
                                                          layer.weight().value().data<float>(),
                                                          layer.bias()->value().data<float>());
  EXPECT_TRUE(aiacc::testing::reference::all_close(y.to_vector<float>(), expected, 1e-5, 1e-5));
}

TEST(LinearLayer, GradientsMatchFiniteDifferences) {
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    Linear layer("fc", 6, 4, bias, 5, DType::f64);
    expect_layer_gradients(layer, random_tensor(Shape{3, 6}, 2));
    Linear single("fc", 5, 1, bias, 6, DType::f64);
    expect_layer_gradients(single, random_tensor(Shape{1, 5}, 3));  // batch 1, one output
  }
}

TEST(LinearLayer, RejectsMismatchedInputs) {
  Linear layer("classifier", 8, 3, true, 1);
  try {
    layer.forward(Tensor::zeros(Shape{4, 7}), true);
    FAIL() << "expected InternalError";
  } catch (const InternalError& error) {
    EXPECT_NE(std::string(error.what()).find("classifier"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[4, 7]"), std::string::npos) << error.what();
  }
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{4, 8}, DType::f64), true), InternalError);
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{8}), true), InternalError);
  EXPECT_THROW(Linear("fresh", 8, 3, true, 1).backward(Tensor::zeros(Shape{4, 3})), InternalError);
  layer.forward(Tensor::zeros(Shape{4, 8}), true);
  EXPECT_THROW(layer.backward(Tensor::zeros(Shape{4, 2})), InternalError);
  EXPECT_THROW(Linear("bad", 0, 3, true, 1), InternalError);
  EXPECT_THROW(Linear("bad", 2, 3, true, 1, DType::f16), InternalError);
}

}  // namespace
}  // namespace aiacc::models
