// aiacc-train's trainer with job.device: cuda on a real GPU: an MLP job (and a small ResNet
// job) trained there follows the same job on the CPU: the losses of every logging interval and
// the test accuracy agree within fp32 GEMM rounding (TF32 convolutions for the ResNet), and
// its checkpoint resumes. Skipped (exit 77) without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/cuda/device_ops.h"
#include "core/cuda/tensor_backend.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

constexpr const char* kImageData =
    "data:\n"
    "  batch_size: 32\n"
    "  train: {type: synthetic_images, synthetic_images: {size: 640, height: 16, width: 16}}\n"
    "  test: {type: synthetic_images, synthetic_images: {size: 128, height: 16, width: 16}}\n"
    "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n";

JobOptions job_in(const std::filesystem::path& run_dir, const std::string& model_block, const std::string& device,
                  const std::string& precision = "fp32", const std::string& data_block = kImageData) {
  std::filesystem::create_directories(run_dir);
  auto path = run_dir / "job.yaml";
  std::ofstream(path) << "job: {name: gpu, run_dir: " << run_dir.string() << ", device: " << device
                      << ", precision: " << precision << "}\n"
                      << model_block << data_block
                      << "train: {epochs: 2, log_every_steps: 5, checkpoint: {every_steps: 20}}\n";
  return load_job(path.string(), {});
}

void expect_gpu_follows_cpu(const std::string& model_block, const std::string& tag, double tolerance,
                            const std::string& precision = "fp32", const std::string& data_block = kImageData) {
  cuda::register_tensor_backend();
  cuda::register_device_ops();
  const auto base = std::filesystem::temp_directory_path() / ("aiacc_gpu_train_" + tag);
  std::filesystem::remove_all(base);
  Trainer on_cpu(job_in(base / "cpu", model_block, "cpu", "fp32", data_block));
  const TrainResult cpu = on_cpu.run();
  Trainer on_gpu(job_in(base / "gpu", model_block, "cuda", precision, data_block));
  const TrainResult gpu = on_gpu.run();
  EXPECT_NEAR(gpu.first_train_loss, cpu.first_train_loss, tolerance * (1 + std::abs(cpu.first_train_loss)));
  EXPECT_NEAR(gpu.last_train_loss, cpu.last_train_loss, tolerance * (1 + std::abs(cpu.last_train_loss)));
  ASSERT_TRUE(gpu.last_eval && cpu.last_eval);
  EXPECT_NEAR(gpu.last_eval->loss, cpu.last_eval->loss, tolerance * (1 + std::abs(cpu.last_eval->loss)));
  EXPECT_LT(gpu.last_train_loss, gpu.first_train_loss);
  std::printf("[ gpu      ] %s: cpu %.1f samples/s, gpu %.1f samples/s; last loss %.5f vs %.5f\n", tag.c_str(),
              cpu.samples_per_second, gpu.samples_per_second, cpu.last_train_loss, gpu.last_train_loss);
  std::filesystem::remove_all(base);
}

TEST(GpuTraining, AnMlpJobOnTheGpuFollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: mlp, mlp: {hidden: [64, 32]}}\n", "mlp", 1e-3);
}

TEST(GpuTraining, AResNetJobOnTheGpuFollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: resnet, resnet: {depth: 8, width: 8}}\n", "resnet", 3e-2);
}

// Mixed precision: bf16 channels-last activations, f32 weights. bf16 keeps 8 bits of mantissa,
// so the bound is looser than TF32's; the run must still learn like the f32 one.
TEST(GpuTraining, AResNetJobInBf16FollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: resnet, resnet: {depth: 8, width: 8}}\n", "resnet_bf16", 8e-2, "bf16");
}

// Wide&Deep: tables in host embedding stores, the MLP and the wide linear term on the GPU; the
// deep tables' bags pooled on the GPU from their unique rows (the default) or on the host.
constexpr const char* kCtrData =
    "data:\n"
    "  batch_size: 64\n"
    "  train: {type: synthetic_ctr, synthetic_ctr: {num_categorical: 6, vocabulary: 200, size: 2560}}\n"
    "  test: {type: synthetic_ctr, synthetic_ctr: {num_categorical: 6, vocabulary: 200, size: 512}}\n"
    "optimizer: {type: adam, lr: 0.01}\n";

TEST(GpuTraining, AWideDeepJobWithHostTablesFollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: wide_deep, wide_deep: {embedding_dim: 8, hidden: [32, 16]}}\n",
                         "wide_deep", 1e-3, "fp32", kCtrData);
}

TEST(GpuTraining, AWideDeepJobWithMeanBagsPooledOnTheHostFollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: wide_deep, wide_deep: {embedding_dim: 8, hidden: [32, 16], "
                         "pooling: mean, embedding_bags: host}}\n",
                         "wide_deep_host_bags", 1e-3, "fp32", kCtrData);
}

TEST(GpuTraining, AWideDeepJobWithMeanBagsPooledOnTheGpuFollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: wide_deep, wide_deep: {embedding_dim: 8, hidden: [32, 16], "
                         "pooling: mean}}\n",
                         "wide_deep_mean", 1e-3, "fp32", kCtrData);
}

// fp16 with dynamic loss scaling: 10 bits of mantissa, gradients scaled by 2^16 and unscaled.
TEST(GpuTraining, AResNetJobInFp16FollowsTheCpuJob) {
  expect_gpu_follows_cpu("model: {type: resnet, resnet: {depth: 8, width: 8}}\n", "resnet_fp16", 5e-2, "fp16");
}

}  // namespace
}  // namespace aiacc::trainer
