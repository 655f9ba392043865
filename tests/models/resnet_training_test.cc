// A few dozen SGD steps of a small ResNet on synthetic_images through the Model API (what the
// trainer does, without it): the loss must fall clearly and the accuracy on held-out examples
// must rise above chance.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "core/optim/optimizer.h"
#include "data/synthetic_images.h"
#include "tests/models/resnet_test_util.h"

namespace aiacc::models {
namespace {

using testing::make_resnet;
using testing::resnet_options;

double accuracy(const Tensor& logits, const Tensor& labels) {
  const std::int64_t n = logits.dim(0), classes = logits.dim(1);
  const float* z = logits.data<float>();
  const std::int64_t* y = labels.data<std::int64_t>();
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = z + i * classes;
    correct += std::max_element(row, row + classes) - row == y[i];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

TEST(ResNetTraining, LossFallsOnSyntheticImages) {
  data::SyntheticImages::Options data_options;
  data_options.height = data_options.width = 16;
  data_options.num_classes = 4;
  data_options.size = 512;
  data_options.noise = 0.8;
  data::SyntheticImages train(data_options, {"train", 3});
  data::SyntheticImages test(data_options, {"test", 3});

  ResNet::Options options = resnet_options(8, 8);
  auto model = make_resnet(options, train.spec().example_shape, train.spec().num_classes);
  optim::OptimizerOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  optim::Optimizer optimizer(sgd, model->parameters());

  constexpr int kSteps = 30;
  constexpr std::int64_t kBatch = 32;
  std::vector<double> losses;
  Batch batch;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::int64_t> indices(kBatch);
    std::iota(indices.begin(), indices.end(), (step * kBatch) % data_options.size);
    train.read(indices, batch);
    losses.push_back(model->forward(batch, /*training=*/true));
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
    model->backward();
    optimizer.step(sgd.lr);
  }
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[kSteps - 1] + losses[kSteps - 2] + losses[kSteps - 3]) / 3;
  EXPECT_NEAR(first, std::log(4.0), 0.5) << "an untrained net should be near chance";
  EXPECT_LT(last, 0.4 * first) << "first " << first << ", last " << last;

  std::vector<std::int64_t> held_out(128);
  std::iota(held_out.begin(), held_out.end(), 0);
  test.read(held_out, batch);
  model->forward(batch, /*training=*/false);
  EXPECT_GT(accuracy(model->outputs(), batch.labels), 0.8);
}

}  // namespace
}  // namespace aiacc::models
