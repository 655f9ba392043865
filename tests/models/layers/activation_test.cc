// ReLU and Flatten layers: values at the ReLU kink, gradients through the layers against
// finite differences (away from the kink), view semantics of Flatten, and errors.
#include "models/layers/activation.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/layers/flatten.h"
#include "tests/models/layers/dense_layer_check.h"

namespace aiacc::models {
namespace {

using testing::expect_layer_gradients;
using testing::random_tensor;

TEST(ReluLayer, ZeroGradientAtTheKink) {
  ReLU relu("relu1");
  const Tensor x = Tensor::from_vector<float>({-1, 0, 2, 0}, Shape{2, 2});
  EXPECT_EQ(relu.forward(x, true).to_vector<float>(), (std::vector<float>{0, 0, 2, 0}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{-1, 0, 2, 0}));  // input untouched
  const Tensor dx = relu.backward(Tensor::full(Shape{2, 2}, 5.0));
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{0, 0, 5, 0}));
}

TEST(ReluLayer, GradientMatchesFiniteDifferencesAwayFromTheKink) {
  ReLU relu("relu");
  Tensor x = random_tensor(Shape{3, 2, 4, 5}, 1);
  for (double& v : x.span<double>()) v += v >= 0 ? 0.01 : -0.01;
  expect_layer_gradients(relu, x);
}

TEST(ReluLayer, RejectsMismatchedGradients) {
  ReLU relu("act");
  EXPECT_THROW(relu.backward(Tensor::zeros(Shape{2})), InternalError);
  relu.forward(Tensor::zeros(Shape{2, 3}), true);
  EXPECT_THROW(relu.backward(Tensor::zeros(Shape{3, 2})), InternalError);
  EXPECT_THROW(relu.backward(Tensor::zeros(Shape{2, 3}, DType::f64)), InternalError);
  EXPECT_THROW(relu.forward(Tensor::zeros(Shape{2}, DType::i32), true), InternalError);
}

TEST(FlattenLayer, ViewsAndGradients) {
  Flatten flatten("flat");
  const Tensor x = random_tensor(Shape{2, 3, 4, 5}, 2, DType::f32);
  const Tensor y = flatten.forward(x, true);
  EXPECT_EQ(y.shape(), (Shape{2, 60}));
  EXPECT_EQ(y.data<float>(), x.data<float>());  // a view, not a copy
  const Tensor dx = flatten.backward(random_tensor(Shape{2, 60}, 3, DType::f32));
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_THROW(flatten.backward(Tensor::zeros(Shape{2, 59})), InternalError);
  EXPECT_EQ(flatten.forward(Tensor::zeros(Shape{4}), true).shape(), (Shape{4, 1}));
  EXPECT_EQ(flatten.forward(Tensor::zeros(Shape{0, 3, 2}), true).shape(), (Shape{0, 6}));

  Flatten checked("flat");
  expect_layer_gradients(checked, random_tensor(Shape{3, 2, 2}, 4));
}

}  // namespace
}  // namespace aiacc::models
