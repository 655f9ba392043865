// aiacc-train's job.device through the whole trainer, on the fake accelerator of
// tests/testing/fake_device.h (whose memory host code cannot read): an MLP and a small ResNet
// trained with checkpoints and evaluation on "cuda:0" end with bitwise the parameters, buffers,
// losses and test metrics of the same jobs on the CPU; a job resumed on the device from a
// checkpoint equals one that never stopped; jobs the device path does not cover are refused by
// key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tests/testing/fake_device.h"
#include "tests/testing/scoped_env.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

using aiacc::testing::ScopedEnv;

constexpr const char* kImages =
    "data:\n"
    "  batch_size: 16\n"
    "  train: {type: synthetic_images, synthetic_images: {size: 96, height: 8, width: 8}}\n"
    "  test: {type: synthetic_images, synthetic_images: {size: 32, height: 8, width: 8}}\n";

JobOptions job_in(const std::filesystem::path& run_dir, const std::string& model_block, const std::string& device,
                  const std::string& optimizer = "{type: sgd, lr: 0.05, momentum: 0.9}",
                  const std::string& train_extra = "", const std::string& precision = "fp32") {
  std::filesystem::create_directories(run_dir);
  auto path = run_dir / "job.yaml";
  std::ofstream(path) << "job: {name: device, run_dir: " << run_dir.string() << ", threads: 1, device: " << device
                      << ", precision: " << precision << "}\n"
                      << model_block << kImages
                      << "optimizer: " << optimizer << "\n"
                      << "train: {epochs: 2, log_every_steps: 3, checkpoint: {every_steps: 4}" << train_extra << "}\n";
  return load_job(path.string(), {});
}

void expect_bitwise(const std::vector<std::pair<std::string, Tensor>>& a,
                    const std::vector<std::pair<std::string, Tensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.num_bytes(), b[i].second.num_bytes()) << a[i].first;
    EXPECT_EQ(0, std::memcmp(a[i].second.raw_data(), b[i].second.raw_data(), a[i].second.num_bytes()))
        << a[i].first;
  }
}

void expect_device_run_equals_cpu_run(const std::string& model_block, const std::string& tag) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / ("aiacc_device_train_" + tag);
  std::filesystem::remove_all(base);
  Trainer on_cpu(job_in(base / "cpu", model_block, "cpu"));
  const TrainResult cpu = on_cpu.run();
  Trainer on_device(job_in(base / "device", model_block, "cuda"));
  const TrainResult device = on_device.run();
  EXPECT_EQ(device.steps, cpu.steps);
  EXPECT_EQ(device.first_train_loss, cpu.first_train_loss);
  EXPECT_EQ(device.last_train_loss, cpu.last_train_loss);
  ASSERT_TRUE(device.last_eval && cpu.last_eval);
  EXPECT_EQ(device.last_eval->loss, cpu.last_eval->loss);
  EXPECT_EQ(device.last_eval->accuracy, cpu.last_eval->accuracy);
  EXPECT_EQ(on_device.model().parameters().front()->value().device(), Device::cuda(0));
  expect_bitwise(on_device.model_tensors(), on_cpu.model_tensors());  // host copies of the device's

  // Resumed on the device from the step-4 checkpoint (written from device tensors): the same end.
  const auto resumed_dir = base / "resumed";
  std::filesystem::create_directories(resumed_dir / "device" / "checkpoints");
  std::filesystem::copy(base / "device" / "device" / "checkpoints" / "step-000000000004",
                        resumed_dir / "device" / "checkpoints" / "step-000000000004", std::filesystem::copy_options::recursive);
  Trainer resumed(job_in(resumed_dir, model_block, "cuda"));
  const TrainResult again = resumed.run();
  EXPECT_EQ(again.resumed_from_step, 4);
  expect_bitwise(resumed.model_tensors(), on_cpu.model_tensors());
  std::filesystem::remove_all(base);
}

TEST(DeviceTraining, AnMlpJobOnTheDeviceEqualsTheCpuJob) {
  expect_device_run_equals_cpu_run("model: {type: mlp, mlp: {hidden: [24, 12]}}\n", "mlp");
}

// train.clip_grad_norm on the device (the norm summed there, the gradients scaled there): the
// same clipped steps and parameters as on the CPU, bit for bit. The fake device sums with the
// CPU's code, so this checks the dispatch; the CUDA kernel has its own GPU test.
TEST(DeviceTraining, AClippedJobOnTheDeviceEqualsTheCpuJob) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_clip";
  std::filesystem::remove_all(base);
  const std::string mlp = "model: {type: mlp, mlp: {hidden: [24, 12]}}\n";
  const std::string sgd = "{type: sgd, lr: 0.05, momentum: 0.9}";
  Trainer on_cpu(job_in(base / "cpu", mlp, "cpu", sgd, ", clip_grad_norm: 0.1"));
  const TrainResult cpu = on_cpu.run();
  Trainer on_device(job_in(base / "device", mlp, "cuda", sgd, ", clip_grad_norm: 0.1"));
  const TrainResult device = on_device.run();
  EXPECT_GT(cpu.clipped_steps, 0);
  EXPECT_EQ(device.clipped_steps, cpu.clipped_steps);
  EXPECT_EQ(device.last_grad_norm, cpu.last_grad_norm);
  expect_bitwise(on_device.model_tensors(), on_cpu.model_tensors());
  std::filesystem::remove_all(base);
}

// train.gradient_accumulation_steps on the device: the micro-batches' gradients summed and
// averaged there (DeviceOps add and multiply), bit for bit the CPU's job.
TEST(DeviceTraining, AnAccumulatingJobOnTheDeviceEqualsTheCpuJob) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_accumulate";
  std::filesystem::remove_all(base);
  const std::string mlp = "model: {type: mlp, mlp: {hidden: [24, 12]}}\n";
  const std::string sgd = "{type: sgd, lr: 0.05, momentum: 0.9}";
  Trainer on_cpu(job_in(base / "cpu", mlp, "cpu", sgd, ", gradient_accumulation_steps: 3"));
  on_cpu.run();
  Trainer on_device(job_in(base / "device", mlp, "cuda", sgd, ", gradient_accumulation_steps: 3"));
  on_device.run();
  expect_bitwise(on_device.model_tensors(), on_cpu.model_tensors());
  // Without accumulation the job trains elsewhere (the comparison can fail).
  Trainer single(job_in(base / "single", mlp, "cpu", sgd, ""));
  single.run();
  const Tensor a = on_cpu.model_tensors().front().second, b = single.model_tensors().front().second;
  EXPECT_NE(0, std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()));
  std::filesystem::remove_all(base);
}

TEST(DeviceTraining, AResNetJobOnTheDeviceEqualsTheCpuJob) {
  expect_device_run_equals_cpu_run("model: {type: resnet, resnet: {depth: 8, width: 4}}\n", "resnet");
}

// Wide&Deep with its tables in host embedding stores and its dense part (deep MLP, the wide
// linear term and bias) on the device: the same job as on the CPU, bit for bit, test AUC
// included, with the deep tables' bags pooled on the device (their unique rows copied over)
// and on the host (pooled rows copied over).
TEST(DeviceTraining, AWideDeepJobWithHostTablesEqualsTheCpuJob) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_wide_deep";
  std::filesystem::remove_all(base);
  const auto job = [&](const std::filesystem::path& dir, const std::string& device, const std::string& bags) {
    std::filesystem::create_directories(dir);
    auto path = dir / "job.yaml";
    std::ofstream(path) << "job: {name: device, run_dir: " << dir.string() << ", threads: 1, device: " << device
                        << "}\n"
                           "model: {type: wide_deep, wide_deep: {embedding_dim: 4, hidden: [16, 8], "
                           "cross_features: [C1_x_C2], embedding_bags: "
                        << bags << "}}\n"
                           "data:\n"
                           "  batch_size: 32\n"
                           "  train: {type: synthetic_ctr, synthetic_ctr: {num_integer: 3, num_categorical: 4, "
                           "vocabulary: 50, size: 320}}\n"
                           "  test: {type: synthetic_ctr, synthetic_ctr: {num_integer: 3, num_categorical: 4, "
                           "vocabulary: 50, size: 128}}\n"
                           "optimizer: {type: adam, lr: 0.01}\n"
                           "train: {epochs: 2, log_every_steps: 5, checkpoint: {every_steps: 10}}\n";
    return load_job(path.string(), {});
  };
  Trainer on_cpu(job(base / "cpu", "cpu", "device"));
  const TrainResult cpu = on_cpu.run();
  // The deep tables' bags pooled on the host (pooled rows go over) give the same job too.
  Trainer host_bags(job(base / "host_bags", "cuda", "host"));
  const TrainResult host_bags_result = host_bags.run();
  EXPECT_EQ(host_bags_result.last_train_loss, cpu.last_train_loss);
  expect_bitwise(host_bags.model_tensors(), on_cpu.model_tensors());
  Trainer on_device(job(base / "device", "cuda", "device"));  // the default: bags on the device
  const TrainResult device = on_device.run();
  EXPECT_EQ(device.first_train_loss, cpu.first_train_loss);
  EXPECT_EQ(device.last_train_loss, cpu.last_train_loss);
  ASSERT_TRUE(device.last_eval && cpu.last_eval);
  EXPECT_EQ(device.last_eval->auc, cpu.last_eval->auc);
  EXPECT_LT(device.last_train_loss, device.first_train_loss);
  bool dense_on_device = false;
  for (Parameter* p : on_device.model().parameters()) {
    if (p->name() == "deep.fc1.weight") dense_on_device = p->value().device() == Device::cuda(0);
  }
  EXPECT_TRUE(dense_on_device);
  expect_bitwise(on_device.model_tensors(), on_cpu.model_tensors());
  std::filesystem::remove_all(base);
}

// A batch of NaN features at step 3 (the trainer's fault injection): its non-finite gradients
// are found on the device and the step skipped, as on the CPU.
TEST(DeviceTraining, ANonFiniteStepIsFoundOnTheDeviceAndSkipped) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_nan";
  std::filesystem::remove_all(base);
  const std::string model = "model: {type: mlp, mlp: {hidden: [8]}}\n";
  Trainer on_cpu(job_in(base / "cpu", model, "cpu", "{type: sgd, lr: 0.05}", ", non_finite: skip"));
  Trainer on_device(job_in(base / "device", model, "cuda", "{type: sgd, lr: 0.05}", ", non_finite: skip"));
  TrainResult cpu;
  TrainResult device;
  {
    const ScopedEnv nan_at_step_3("AIACC_TEST_NAN_AT", "3");
    cpu = on_cpu.run();
    device = on_device.run();
  }
  EXPECT_EQ(device.last_train_loss, cpu.last_train_loss);
  expect_bitwise(on_device.model_tensors(), on_cpu.model_tensors());
  // The skipped step left the parameters finite (a NaN step applied would not have).
  for (const auto& [name, tensor] : on_device.model_tensors()) {
    for (float v : tensor.to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
  std::filesystem::remove_all(base);
}

// Mixed precision through the whole trainer: bf16 and fp16 (loss-scaled) channels-last ResNet
// jobs follow the f32 CPU job within their rounding and keep f32 weights.
TEST(DeviceTraining, MixedPrecisionResNetJobsFollowTheCpuJob) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_mixed";
  std::filesystem::remove_all(base);
  const std::string model = "model: {type: resnet, resnet: {depth: 8, width: 4}}\n";
  Trainer on_cpu(job_in(base / "cpu", model, "cpu"));
  const TrainResult cpu = on_cpu.run();
  for (const std::string precision : {"bf16", "fp16"}) {
    Trainer mixed(job_in(base / precision, model, "cuda", "{type: sgd, lr: 0.05, momentum: 0.9}", "", precision));
    const TrainResult got = mixed.run();
    EXPECT_EQ(got.steps, cpu.steps) << precision;
    EXPECT_NEAR(got.last_train_loss, cpu.last_train_loss, 5e-2 * (1 + cpu.last_train_loss)) << precision;
    ASSERT_TRUE(got.last_eval && cpu.last_eval);
    EXPECT_NEAR(got.last_eval->loss, cpu.last_eval->loss, 5e-2 * (1 + cpu.last_eval->loss)) << precision;
    EXPECT_NE(got.last_train_loss, cpu.last_train_loss) << precision << " rounds activations";
    for (Parameter* p : mixed.model().parameters()) EXPECT_EQ(p->value().dtype(), DType::f32) << p->name();
    if (precision == "fp16") {
      // 2^16 times a mean-loss gradient fits fp16 for this small net: no step was lost.
      EXPECT_EQ(got.overflow_steps, 0);
      EXPECT_EQ(got.loss_scale, 65536.0);
    }
  }
  std::filesystem::remove_all(base);
}

// An fp16 step whose gradients overflow (here: a batch of NaN features) is skipped and the loss
// scale halves; training goes on (train.non_finite stays "stop": overflow is expected in fp16).
TEST(DeviceTraining, AnOverflowingFp16StepIsSkippedAndTheLossScaleBacksOff) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_fp16_overflow";
  std::filesystem::remove_all(base);
  Trainer job(job_in(base, "model: {type: resnet, resnet: {depth: 8, width: 4}}\n", "cuda",
                     "{type: sgd, lr: 0.05, momentum: 0.9}", "", "fp16"));
  const TrainResult got = [&] {
    const ScopedEnv nan_at_step_3("AIACC_TEST_NAN_AT", "3");
    return job.run();
  }();
  EXPECT_EQ(got.overflow_steps, 1);
  EXPECT_EQ(got.loss_scale, 32768.0);
  // The scale is part of the checkpoints: a job resumed from step 4 (after the overflow at
  // step 3) continues at 2^15, not at the initial 2^16.
  const auto resumed_dir = base / "resumed";
  std::filesystem::create_directories(resumed_dir / "device" / "checkpoints");
  std::filesystem::copy(base / "device" / "checkpoints" / "step-000000000004",
                        resumed_dir / "device" / "checkpoints" / "step-000000000004",
                        std::filesystem::copy_options::recursive);
  Trainer resumed(job_in(resumed_dir, "model: {type: resnet, resnet: {depth: 8, width: 4}}\n", "cuda",
                         "{type: sgd, lr: 0.05, momentum: 0.9}", "", "fp16"));
  const TrainResult again = resumed.run();
  EXPECT_EQ(again.resumed_from_step, 4);
  EXPECT_EQ(again.overflow_steps, 0);
  EXPECT_EQ(again.loss_scale, 32768.0);
  // The weights never took the step (batch-norm running statistics did see the batch in its
  // forward, as in PyTorch's GradScaler).
  for (Parameter* p : job.model().parameters()) {
    for (float v : p->value().to(Device::cpu()).to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << p->name();
  }
  std::filesystem::remove_all(base);
}

// job.device: cuda with several workers: local rank r on GPU r, or GPU 0 where the launcher
// gave the process a GPU of its own (CUDA_VISIBLE_DEVICES names one device, under Slurm's
// --gpus-per-task or as the job's only process on the machine; local rank 1 used to ask for a
// cuda:1 it could not see); cuda:N and one worker as written.
TEST(DeviceTraining, EachWorkersGpuFollowsItsLocalRankOrItsOnlyVisibleGpu) {
  const auto job = [](const std::string& device, int workers) {
    JobOptions options;
    options.job.device = device;
    options.cluster.workers = workers;
    return options;
  };
  const ScopedEnv no_visible_devices("CUDA_VISIBLE_DEVICES", std::nullopt);
  const ScopedEnv no_local_world_size("LOCAL_WORLD_SIZE", std::nullopt);
  const ScopedEnv no_gpus_per_task("SLURM_GPUS_PER_TASK", std::nullopt);
  EXPECT_EQ(job_device(job("cuda", 2), 1), Device::cuda(1));
  EXPECT_EQ(job_device(job("cuda", 1), 1), Device::cuda(0));
  EXPECT_EQ(job_device(job("cuda:3", 2), 1), Device::cuda(3));
  {
    const ScopedEnv one_visible_device("CUDA_VISIBLE_DEVICES", "5");
    {
      // One device for the whole node (two processes here see the same variable): GPU r as
      // ever, whose absence the plugin reports, not every worker on one GPU.
      const ScopedEnv two_local_processes("LOCAL_WORLD_SIZE", "2");
      EXPECT_EQ(job_device(job("cuda", 2), 1), Device::cuda(1));
    }
    {
      const ScopedEnv one_local_process("LOCAL_WORLD_SIZE", "1");  // one process of the job on this machine
      EXPECT_EQ(job_device(job("cuda", 2), 1), Device::cuda(0));
    }
    const ScopedEnv gpu_per_task("SLURM_GPUS_PER_TASK", "1");  // Slurm binds a GPU to each task
    EXPECT_EQ(job_device(job("cuda", 2), 1), Device::cuda(0));
    const ScopedEnv two_visible_devices("CUDA_VISIBLE_DEVICES", "4,5");
    EXPECT_EQ(job_device(job("cuda", 2), 1), Device::cuda(1));
  }
  EXPECT_EQ(job_device(job("cpu", 2), 1), Device::cpu());
}

TEST(DeviceTraining, JobsTheDevicePathDoesNotCoverAreRefusedByKey) {
  testing::install_fake_device();
  const auto base = std::filesystem::temp_directory_path() / "aiacc_device_train_refused";
  std::filesystem::remove_all(base);
  EXPECT_THAT([&] { Trainer t(job_in(base / "dropout", "model: {type: mlp, mlp: {hidden: [8], dropout: 0.5}}\n", "cuda")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("model.mlp.dropout 0.5 runs on the CPU only")));
  EXPECT_THAT([&] { Trainer t(job_in(base / "lamb", "model: {type: mlp}\n", "cuda", "{type: lamb}")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("optimizer.type: lamb runs on the CPU only")));
  EXPECT_THAT([&] { job_in(base / "bad", "model: {type: mlp}\n", "gpu0"); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("job.device: expected cpu, cuda or cuda:N")));
  EXPECT_THAT([&] { Trainer t(job_in(base / "cpu16", "model: {type: resnet, resnet: {depth: 8, width: 4}}\n", "cpu",
                                     "{type: sgd, lr: 0.05}", "", "fp16")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("job.precision: fp16 is mixed precision on a GPU")));
  EXPECT_THAT([&] { Trainer t(job_in(base / "mlp16", "model: {type: mlp}\n", "cuda", "{type: sgd, lr: 0.05}", "",
                                     "bf16")); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("job.precision: the mlp trains in f32 only")));
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace aiacc::trainer
