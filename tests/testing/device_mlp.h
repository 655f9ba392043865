// A small MLP (linear, ReLU, linear; softmax cross-entropy) trained where its parameters are,
// for the tests of device dispatch: on the fake device (tests/models/device_dispatch_test.cc)
// and on a GPU (tests/gpu/device_dispatch_test.cc), each against the same run on the CPU.
#pragma once

#include <memory>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/util/random.h"
#include "models/layers/activation.h"
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

struct Batch {
  Tensor x, labels;
};
inline Batch batch(int step) {
  Rng rng(static_cast<std::uint64_t>(step), 5);
  std::vector<float> x(kBatch * kIn);
  for (auto& v : x) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  std::vector<std::int64_t> labels(kBatch);
  for (auto& l : labels) l = static_cast<std::int64_t>(rng.below(kClasses));
  return {Tensor::from_vector(x, {kBatch, kIn}), Tensor::from_vector(labels, {kBatch})};
}

inline Tensor to_device(const Tensor& host, Device device) {
  Tensor t = Tensor::empty(host.shape(), host.dtype(), device);
  t.copy_from(host);
  return t;
}

// Trains `steps` steps where the parameters are; returns the losses.
inline std::vector<double> train_mlp(models::Sequential& net, const optim::OptimizerOptions& options,
                                     Device device, int steps) {
  for (Parameter* p : net.parameters()) p->to(device);
  optim::Optimizer optimizer(options, net.parameters());
  models::SoftmaxCrossEntropy loss;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch b = batch(step % 2);  // two batches in turn: learnable
    const Tensor logits = net.forward(to_device(b.x, device), true);
    losses.push_back(loss.forward(logits, to_device(b.labels, device)));
    net.backward(loss.backward(), false);
    optimizer.step(options.lr);
  }
  return losses;
}

inline std::vector<float> host_values(Parameter& p) {
  Tensor host = Tensor::empty(p.value().shape(), p.value().dtype());
  host.copy_from(p.value());
  return host.to_vector<float>();
}

}  // namespace aiacc::testing
