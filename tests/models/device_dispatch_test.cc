// Layers, parameters and the dense optimiser on a device, through the fake accelerator of
// tests/testing/fake_device.h: an MLP and a CNN with every ResNet layer trained on it follow
// the CPU runs bit for bit (the fake runs the CPU kernels), nothing comes back to the host
// during the steps but the loss, and mismatched devices, a biased convolution and optimisers
// without a device path are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/optim/optimizer.h"
#include "models/layers/conv2d.h"
#include "models/layers/linear.h"
#include "tests/testing/device_mlp.h"
#include "tests/testing/fake_device.h"

namespace aiacc::models {
namespace {

using testing::cnn;
using testing::host_values;
using testing::mlp;
using testing::train_on;

class DeviceDispatch : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceDispatch, AnMlpTrainedOnTheDeviceFollowsTheCpuRun) {
  testing::FakeDeviceLog& log = testing::install_fake_device();
  optim::OptimizerOptions options;
  options.type = GetParam();
  options.lr = 0.05;
  options.momentum = GetParam() == "sgd" ? 0.9 : 0.0;
  options.weight_decay = 0.01;
  auto on_cpu = mlp();
  auto on_device = mlp();
  const std::vector<double> cpu_losses = train_on(*on_cpu, options, Device::cpu(), 12);

  const int to_host_before = log.to_host, to_device_before = log.to_device, ops_before = log.ops;
  const std::vector<double> device_losses = train_on(*on_device, options, Device::cuda(0), 12);
  // Per step: the batch and its labels go to the device; nothing comes back but the loss.
  EXPECT_EQ(log.to_host, to_host_before);
  EXPECT_EQ(log.to_device - to_device_before, 4 + 2 * 12);  // 4 parameters moved, then batches
  // Per step: 2 linear + 1 relu forward, loss, 2 x 2 linear backward (fc1 without dx) - 1,
  // 1 relu backward, 4 optimiser updates.
  EXPECT_EQ(log.ops - ops_before, 12 * (3 + 1 + 3 + 1 + 4));

  EXPECT_EQ(device_losses, cpu_losses);
  EXPECT_LT(cpu_losses[10], cpu_losses[0]);  // it trained (same batch)
  const auto cpu_params = on_cpu->parameters(), device_params = on_device->parameters();
  ASSERT_EQ(cpu_params.size(), device_params.size());
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(device_params[i]->value().device(), Device::cuda(0));
    EXPECT_EQ(host_values(*device_params[i]), cpu_params[i]->value().to_vector<float>())
        << cpu_params[i]->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, DeviceDispatch, ::testing::Values("adam", "adamw", "sgd"));

// Convolutions, batch norm (running statistics included), max and average pooling, a residual
// block with a projection, global pooling: the CNN on the fake device equals the CPU run, then
// evaluates alike from its running statistics.
TEST(DeviceDispatch, ACnnWithEveryResNetLayerFollowsTheCpuRun) {
  testing::FakeDeviceLog& log = testing::install_fake_device();
  const optim::OptimizerOptions options = testing::sgd_with_momentum();
  auto on_cpu = cnn();
  auto on_device = cnn();
  const auto cpu_losses = train_on(*on_cpu, options, Device::cpu(), 8, true);
  const int to_host_before = log.to_host;
  const auto device_losses = train_on(*on_device, options, Device::cuda(0), 8, true);
  EXPECT_EQ(log.to_host, to_host_before);
  EXPECT_EQ(device_losses, cpu_losses);
  EXPECT_LT(cpu_losses[6], cpu_losses[0]);
  const auto cpu_params = on_cpu->parameters(), device_params = on_device->parameters();
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(host_values(*device_params[i]), cpu_params[i]->value().to_vector<float>()) << cpu_params[i]->name();
  }
  // Evaluation mode normalises with the running statistics the training steps left.
  const testing::Batch b = testing::batch(5, true);
  const Tensor cpu_logits = on_cpu->forward(b.x, false);
  const Tensor device_logits = on_device->forward(b.x.to(Device::cuda(0)), false);
  EXPECT_EQ(device_logits.to(Device::cpu()).to_vector<float>(), cpu_logits.to_vector<float>());
}

ActivationFormat format(DType dtype, bool channels_last) {
  ActivationFormat f;
  f.dtype = dtype;
  f.channels_last = channels_last;
  return f;
}

// Channels-last f32 only moves values: every layer must read and write NHWC (a layer that took
// its input as NCHW would scramble it), and the run then equals the CPU's bit for bit.
TEST(DeviceDispatch, AChannelsLastCnnEqualsTheCpuRun) {
  testing::install_fake_device();
  const optim::OptimizerOptions options = testing::sgd_with_momentum();
  auto on_cpu = cnn();
  auto on_device = cnn();
  const auto cpu_losses = train_on(*on_cpu, options, Device::cpu(), 6, true);
  const auto device_losses = train_on(*on_device, options, Device::cuda(0), 6, true, format(DType::f32, true));
  EXPECT_EQ(device_losses, cpu_losses);
  const auto cpu_params = on_cpu->parameters(), device_params = on_device->parameters();
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(host_values(*device_params[i]), cpu_params[i]->value().to_vector<float>()) << cpu_params[i]->name();
  }
}

// Mixed precision (bf16 channels-last activations, f32 weights and updates): the fake device
// rounds where the GPU rounds, so the run follows the f32 one within bf16's 8-bit mantissa,
// and still learns; the weights stay f32.
TEST(DeviceDispatch, ABf16ChannelsLastCnnFollowsTheCpuRunWithinBf16Rounding) {
  testing::install_fake_device();
  const optim::OptimizerOptions options = testing::sgd_with_momentum();
  auto on_cpu = cnn();
  auto on_device = cnn();
  const auto cpu_losses = train_on(*on_cpu, options, Device::cpu(), 10, true);
  const auto device_losses = train_on(*on_device, options, Device::cuda(0), 10, true, format(DType::bf16, true));
  ASSERT_EQ(device_losses.size(), cpu_losses.size());
  double worst = 0;
  for (std::size_t i = 0; i < cpu_losses.size(); ++i) {
    EXPECT_NEAR(device_losses[i], cpu_losses[i], 3e-2 * (1.0 + std::abs(cpu_losses[i]))) << "step " << i;
    worst = std::max(worst, std::abs(device_losses[i] - cpu_losses[i]));
  }
  EXPECT_GT(worst, 0.0) << "bf16 activations must round somewhere";
  EXPECT_LT(device_losses[8], device_losses[0]);
  for (Parameter* p : on_device->parameters()) EXPECT_EQ(p->value().dtype(), DType::f32) << p->name();
  // Evaluation from the running statistics, in the same format.
  const testing::Batch b = testing::batch(5, true);
  const auto cpu_logits = on_cpu->forward(b.x, false).to_vector<float>();
  const auto device_logits =
      on_device->forward(testing::in_format(b.x, Device::cuda(0), format(DType::bf16, true)), false)
          .to(Device::cpu())
          .to_vector<float>();
  ASSERT_EQ(device_logits.size(), cpu_logits.size());
  for (std::size_t i = 0; i < cpu_logits.size(); ++i) {
    EXPECT_NEAR(device_logits[i], cpu_logits[i], 0.1 * (1.0 + std::abs(cpu_logits[i]))) << i;
  }
}

TEST(DeviceDispatchErrors, MismatchedDevicesAndCpuOnlyOptimisersAreNamed) {
  testing::install_fake_device();
  Linear layer("fc", 3, 2, true, 1);
  for (Parameter* p : layer.parameters()) p->to(Device::cuda(0));
  EXPECT_THAT([&] { layer.forward(Tensor::zeros({4, 3}), true); },
              ::testing::ThrowsMessage<InternalError>(::testing::AllOf(
                  ::testing::HasSubstr("fc: input is f32 on cpu"), ::testing::HasSubstr("on cuda:0"))));
  Conv2d with_bias("conv", 3, 4, 3, 1, 1, true, 2);
  with_bias.to(Device::cuda(0));
  EXPECT_THAT([&] { with_bias.forward(Tensor::zeros({1, 3, 5, 5}, DType::f32, Device::cuda(0)), true); },
              ::testing::ThrowsMessage<InternalError>(::testing::HasSubstr("conv: on cuda:0 a convolution has no bias")));
  // A layer set for bf16 activations names what it got and what it takes.
  MaxPool2d pool("pool", 2, 2);
  pool.to(Device::cuda(0), format(DType::bf16, true));
  EXPECT_THAT([&] { pool.forward(Tensor::zeros({1, 3, 4, 4}, DType::f32, Device::cuda(0)), true); },
              ::testing::ThrowsMessage<InternalError>(::testing::AllOf(
                  ::testing::HasSubstr("pool: input is f32 on cuda:0"), ::testing::HasSubstr("bf16 nhwc"))));
  optim::OptimizerOptions adagrad;
  adagrad.type = "adagrad";
  EXPECT_THAT([&] { optim::Optimizer optimizer(adagrad, layer.parameters()); },
              ::testing::ThrowsMessage<InternalError>(::testing::AllOf(
                  ::testing::HasSubstr("'fc.weight' is on cuda:0"), ::testing::HasSubstr("'adagrad' runs on the CPU only"))));
}

}  // namespace
}  // namespace aiacc::models
