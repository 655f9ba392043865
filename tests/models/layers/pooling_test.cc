// Pooling layers: output shapes, gradients through the layers against finite differences (on
// inputs without ties), the tie rule seen through MaxPool2d, and shape errors.
#include "models/layers/pooling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/util/random.h"
#include "tests/models/layers/dense_layer_check.h"

namespace aiacc::models {
namespace {

using testing::expect_layer_gradients;
using testing::random_tensor;

// Distinct values 1e-3 apart in random order: no ties, so max pooling is differentiable at
// every input for a finite-difference step of 1e-6.
Tensor distinct_tensor(const Shape& shape, std::uint64_t seed) {
  std::vector<double> values(shape.numel());
  std::iota(values.begin(), values.end(), 0.0);
  Rng rng(seed);
  for (std::size_t i = values.size() - 1; i > 0; --i)
    std::swap(values[i], values[rng.below(i + 1)]);
  for (double& v : values) v = (v - values.size() / 2.0) * 1e-3;
  return Tensor::from_vector(values, shape);
}

TEST(PoolingLayers, OutputShapes) {
  const Tensor x = Tensor::zeros(Shape{2, 3, 28, 28});
  EXPECT_EQ(MaxPool2d("pool", 2, 2).forward(x, false).shape(), (Shape{2, 3, 14, 14}));
  EXPECT_EQ(MaxPool2d("pool", 3, 2, 1).forward(x, false).shape(), (Shape{2, 3, 14, 14}));
  EXPECT_EQ(AvgPool2d("pool", 3, 1, 1).forward(x, false).shape(), (Shape{2, 3, 28, 28}));
  EXPECT_EQ(GlobalAvgPool("gap").forward(x, false).shape(), (Shape{2, 3}));
}

TEST(PoolingLayers, GradientsMatchFiniteDifferences) {
  {
    MaxPool2d layer("max", 3, 2, 1);
    expect_layer_gradients(layer, distinct_tensor(Shape{2, 2, 7, 6}, 1));
  }
  {
    MaxPool2d layer("max", 2, 2);
    expect_layer_gradients(layer, distinct_tensor(Shape{1, 3, 4, 5}, 2));
  }
  {
    AvgPool2d layer("avg", 3, 2, 1);
    expect_layer_gradients(layer, random_tensor(Shape{2, 2, 7, 6}, 3));
  }
  {
    GlobalAvgPool layer("gap");
    expect_layer_gradients(layer, random_tensor(Shape{3, 4, 3, 5}, 4));
  }
}

TEST(PoolingLayers, MaxPoolRoutesTiedGradientsToTheFirstMaximum) {
  MaxPool2d layer("max", 2, 2);
  const Tensor x = Tensor::from_vector<float>({3, 3, 3, 3}, Shape{1, 1, 2, 2});
  EXPECT_EQ(layer.forward(x, true).to_vector<float>(), std::vector<float>{3});
  const Tensor dx = layer.backward(Tensor::full(Shape{1, 1, 1, 1}, 2.0));
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{2, 0, 0, 0}));
}

TEST(PoolingLayers, RejectsBadInputs) {
  EXPECT_THROW(MaxPool2d("p", 2, 2, 2), InternalError);  // padding beyond half the window
  EXPECT_THROW(AvgPool2d("p", 0, 1), InternalError);
  MaxPool2d layer("pool3", 2, 2);
  try {
    layer.forward(Tensor::zeros(Shape{2, 3, 8}), true);
    FAIL() << "expected InternalError";
  } catch (const InternalError& error) {
    EXPECT_NE(std::string(error.what()).find("pool3"), std::string::npos) << error.what();
  }
  EXPECT_THROW(layer.backward(Tensor::zeros(Shape{1, 1, 1, 1})), InternalError);  // no forward
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{1, 1, 1, 1}), true), InternalError);
  EXPECT_THROW(layer.forward(Tensor::zeros(Shape{1, 1, 4, 4}, DType::i64), true), InternalError);
  layer.forward(Tensor::zeros(Shape{1, 1, 4, 4}), true);
  EXPECT_THROW(layer.backward(Tensor::zeros(Shape{1, 1, 4, 4})), InternalError);
  GlobalAvgPool gap("gap");
  EXPECT_THROW(gap.backward(Tensor::zeros(Shape{1, 1})), InternalError);
  gap.forward(Tensor::zeros(Shape{2, 3, 4, 4}), true);
  EXPECT_THROW(gap.backward(Tensor::zeros(Shape{2, 4})), InternalError);
}

}  // namespace
}  // namespace aiacc::models
