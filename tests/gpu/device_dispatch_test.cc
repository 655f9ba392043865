// Layers and the dense optimiser on the GPU through cuda::register_device_ops(): the MLP and the
// CNN of tests/testing/device_mlp.h trained on cuda:0 (cuBLAS GEMMs, cuDNN convolution, batch
// norm and pooling, our ReLU, join, loss and update kernels) follow the same networks trained
// on the CPU, step by step.
// Skipped (exit 77) without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cuda/device_ops.h"
#include "core/cuda/tensor_backend.h"
#include "tests/testing/device_mlp.h"

namespace aiacc::cuda {
namespace {

class GpuDeviceDispatch : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuDeviceDispatch, AnMlpTrainedOnTheGpuFollowsTheCpuRun) {
  register_tensor_backend();
  register_device_ops();
  optim::OptimizerOptions options;
  options.type = GetParam();
  options.lr = 0.05;
  options.momentum = GetParam() == "sgd" ? 0.9 : 0.0;
  auto on_cpu = testing::mlp();
  auto on_gpu = testing::mlp();
  const auto cpu_losses = testing::train_on(*on_cpu, options, Device::cpu(), 30);
  const auto gpu_losses = testing::train_on(*on_gpu, options, Device::cuda(0), 30);
  ASSERT_EQ(gpu_losses.size(), cpu_losses.size());
  for (std::size_t i = 0; i < cpu_losses.size(); ++i) {
    // fp32 GEMMs in another summation order: the trajectories drift apart by rounding only.
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 1e-4 * (1.0 + std::abs(cpu_losses[i]))) << "step " << i;
  }
  EXPECT_LT(cpu_losses[28], cpu_losses[0]);
  const auto cpu_params = on_cpu->parameters(), gpu_params = on_gpu->parameters();
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    const auto gpu = testing::host_values(*gpu_params[i]);
    const auto cpu = cpu_params[i]->value().to_vector<float>();
    for (std::size_t j = 0; j < cpu.size(); ++j) {
      ASSERT_NEAR(gpu[j], cpu[j], 1e-3 * (1.0 + std::abs(cpu[j]))) << cpu_params[i]->name() << "[" << j << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, GpuDeviceDispatch, ::testing::Values("adam", "sgd"));

// cuDNN convolutions (TF32 allowed, as PyTorch's default: looser bounds), batch norm, pooling
// and the residual join: the CNN's losses on the GPU follow the CPU's.
TEST(GpuDeviceDispatch, ACnnWithEveryResNetLayerFollowsTheCpuRun) {
  register_tensor_backend();
  register_device_ops();
  const optim::OptimizerOptions options = testing::sgd_with_momentum();
  auto on_cpu = testing::cnn();
  auto on_gpu = testing::cnn();
  const auto cpu_losses = testing::train_on(*on_cpu, options, Device::cpu(), 12, true);
  const auto gpu_losses = testing::train_on(*on_gpu, options, Device::cuda(0), 12, true);
  for (std::size_t i = 0; i < cpu_losses.size(); ++i) {
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 1e-2 * (1.0 + std::abs(cpu_losses[i]))) << "step " << i;
  }
  EXPECT_LT(gpu_losses[10], gpu_losses[0]);
}

// The same CNN with mixed precision (bf16 or fp16 channels-last activations through cuDNN, f32
// weights and updates; no loss scale needed at this size) and with f32 channels-last: all
// follow the CPU's f32 run.
TEST(GpuDeviceDispatch, ACnnInBf16AndChannelsLastFollowsTheCpuRun) {
  register_tensor_backend();
  register_device_ops();
  const optim::OptimizerOptions options = testing::sgd_with_momentum();
  auto on_cpu = testing::cnn();
  const auto cpu_losses = testing::train_on(*on_cpu, options, Device::cpu(), 12, true);
  for (const auto& [dtype, tolerance] :
       {std::pair{DType::f32, 1e-2}, std::pair{DType::bf16, 4e-2}, std::pair{DType::f16, 2e-2}}) {
    ActivationFormat format;
    format.dtype = dtype;
    format.channels_last = true;
    auto on_gpu = testing::cnn();
    const auto gpu_losses = testing::train_on(*on_gpu, options, Device::cuda(0), 12, true, format);
    for (std::size_t i = 0; i < cpu_losses.size(); ++i) {
      EXPECT_NEAR(gpu_losses[i], cpu_losses[i], tolerance * (1.0 + std::abs(cpu_losses[i])))
          << format.str() << " step " << i;
    }
    EXPECT_LT(gpu_losses[10], gpu_losses[0]) << format.str();
  }
}

}  // namespace
}  // namespace aiacc::cuda
