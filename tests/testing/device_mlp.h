// Small networks trained where their parameters are, for the tests of device dispatch: on the
// fake device (tests/models/device_dispatch_test.cc) and on a GPU
// (tests/gpu/device_dispatch_test.cc), each against the same run on the CPU. An MLP (linear,
// ReLU, linear), and a CNN with every layer a ResNet has (convolution, batch norm, max and
// average pooling, a residual block with a projection shortcut, global pooling, linear).
#pragma once

#include <memory>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/util/random.h"
#include "models/layers/activation.h"
#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/flatten.h"
#include "models/layers/pooling.h"
#include "models/layers/residual_block.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "models/layers/sequential.h"

namespace aiacc::testing {

constexpr std::int64_t kBatch = 16, kIn = 8, kHidden = 12, kClasses = 4;

inline std::unique_ptr<models::Sequential> mlp() {
  auto net = std::make_unique<models::Sequential>("mlp");
  net->add(std::make_unique<models::Linear>("fc1", kIn, kHidden, true, 11));
  net->add(std::make_unique<models::ReLU>("relu"));
  net->add(std::make_unique<models::Linear>("fc2", kHidden, kClasses, true, 12));
  return net;
}

// Images [N, 3, 12, 12] -> conv 3x3 (8) + BN + ReLU -> max pool 2 -> residual block (two conv
// + BN, projection 1x1 conv + BN to 16 channels, stride 2) -> average pool 2 -> global pool ->
// linear to kClasses.
constexpr std::int64_t kImage = 12;
inline std::unique_ptr<models::Sequential> cnn() {
  using namespace models;
  auto net = std::make_unique<Sequential>("cnn");
  net->add(std::make_unique<Conv2d>("conv1", 3, 8, 3, 1, 1, false, 21));
  net->add(std::make_unique<BatchNorm>("bn1", 8));
  net->add(std::make_unique<ReLU>("relu1"));
  net->add(std::make_unique<MaxPool2d>("pool1", 2, 2));
  auto main = std::make_unique<Sequential>("block.main");
  main->add(std::make_unique<Conv2d>("block.conv1", 8, 16, 3, 2, 1, false, 22));
  main->add(std::make_unique<BatchNorm>("block.bn1", 16));
  main->add(std::make_unique<ReLU>("block.relu"));
  main->add(std::make_unique<Conv2d>("block.conv2", 16, 16, 3, 1, 1, false, 23));
  main->add(std::make_unique<BatchNorm>("block.bn2", 16));
  auto shortcut = std::make_unique<Sequential>("block.shortcut");
  shortcut->add(std::make_unique<Conv2d>("block.proj", 8, 16, 1, 2, 0, false, 24));
  shortcut->add(std::make_unique<BatchNorm>("block.proj_bn", 16));
  net->add(std::make_unique<ResidualBlock>("block", std::move(main), std::move(shortcut)));
  net->add(std::make_unique<AvgPool2d>("pool2", 2, 1));
  net->add(std::make_unique<GlobalAvgPool>("gap"));
  net->add(std::make_unique<Linear>("fc", 16, kClasses, true, 25));
  return net;
}

struct Batch {
  Tensor x, labels;
};
// `image`: a batch for the CNN ([N, 3, 12, 12]), else for the MLP ([N, kIn]).
inline Batch batch(int step, bool image = false) {
  Rng rng(static_cast<std::uint64_t>(step), 5);
  const Shape shape = image ? Shape{kBatch, 3, kImage, kImage} : Shape{kBatch, kIn};
  std::vector<float> x(static_cast<std::size_t>(shape.numel()));
  for (auto& v : x) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  std::vector<std::int64_t> labels(kBatch);
  for (auto& l : labels) l = static_cast<std::int64_t>(rng.below(kClasses));
  return {Tensor::from_vector(x, shape), Tensor::from_vector(labels, {kBatch})};
}

// SGD with momentum 0.9 at lr 0.1: what the CNN comparisons train with.
inline optim::OptimizerOptions sgd_with_momentum() {
  optim::OptimizerOptions options;
  options.type = "sgd";
  options.lr = 0.1;
  options.momentum = 0.9;
  return options;
}

// x (f32 [N, C, H, W] on the CPU) on `device` in `format`, as a model hands its first layer.
inline Tensor in_format(const Tensor& x, Device device, const ActivationFormat& format) {
  Tensor on_device = x.to(device);
  if (format.is_default()) return on_device;
  Tensor out = Tensor::empty(x.shape(), format.dtype, device);
  device_ops(device).to_activation_format(device, format, x.dim(0), x.dim(1), x.dim(2) * x.dim(3),
                                          on_device.data<float>(), out.raw_data());
  return out;
}

// Moves `net` to `device` (activations in `format`) and trains it `steps` steps there; returns
// the losses.
inline std::vector<double> train_on(models::Sequential& net, const optim::OptimizerOptions& options,
                                    Device device, int steps, bool image = false,
                                    const ActivationFormat& format = {}) {
  net.to(device, format);
  optim::Optimizer optimizer(options, net.parameters());
  models::SoftmaxCrossEntropy loss;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = batch(step % 2, image);  // two batches in turn: learnable
    const Tensor logits = net.forward(image ? in_format(b.x, device, format) : b.x.to(device), true);
    losses.push_back(loss.forward(logits, b.labels.to(device)));
    net.backward(loss.backward(), false);
    optimizer.step(options.lr);
  }
  return losses;
}

inline std::vector<float> host_values(Parameter& p) { return p.value().to(Device::cpu()).to_vector<float>(); }

}  // namespace aiacc::testing
