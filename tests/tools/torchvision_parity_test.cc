// Our ResNet is torchvision's ResNet: after a few training steps in aiacc-train, the model's
// tensors load into torchvision.models.resnet18 with load_state_dict(strict=True) (same names,
// shapes and buffers) and both produce the same eval-mode logits on the same input. Exits 77
// (Meson: SKIP) where python3 with torch and torchvision is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/io/safetensors.h"
#include "core/util/random.h"
#include "tests/testing/process.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

std::string g_python;

TEST(TorchvisionParity, TrainedResNet18MatchesTorchvision) {
  auto dir = std::filesystem::temp_directory_path() / "aiacc_torchvision_parity";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "job.yaml")
      << "job: {name: parity, run_dir: " << dir.string() << "}\n"
         "model: {type: resnet, resnet: {depth: 18, stem: imagenet}}\n"
         "data:\n  batch_size: 4\n"
         "  train: {type: synthetic_images, synthetic_images: {size: 12, channels: 3, height: 64, width: 64}}\n"
         "  test: {type: synthetic_images, synthetic_images: {size: 4, channels: 3, height: 64, width: 64}}\n"
         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
         "train: {epochs: 1, eval_each_epoch: false, checkpoint: {at_end: false}}\n";
  Trainer trainer(load_job((dir / "job.yaml").string(), {}));
  trainer.run();  // 3 steps: weights and batch-norm statistics move away from their init

  Batch batch;
  batch.inputs = Tensor::empty({2, 3, 64, 64});
  Rng rng(7);
  for (float& v : batch.inputs.span<float>()) v = static_cast<float>(rng.normal());
  batch.labels = Tensor::zeros({2}, DType::i64);
  trainer.model().forward(batch, /*training=*/false);

  auto tensors = trainer.model_tensors();
  tensors.emplace_back("parity.input", batch.inputs);
  tensors.emplace_back("parity.logits", trainer.model().outputs());
  const auto file = dir / "parity.safetensors";
  io::write_safetensors(file.string(), tensors, {{"format", "pt"}});

  auto result = aiacc::testing::run_command(
      g_python + " " + (aiacc::testing::source_root() / "tests/tools/torchvision_parity_check.py").string() +
      " " + file.string() + " resnet18 10 2>&1");
  std::printf("%s", result.output.c_str());
  EXPECT_EQ(result.status, 0) << result.output;
}

}  // namespace
}  // namespace aiacc::trainer

int main(int argc, char** argv) {
  aiacc::trainer::g_python = aiacc::testing::python_with({"torch", "torchvision"});
  if (aiacc::trainer::g_python.empty()) {
    std::printf("SKIP: no python3 with torch and torchvision (apt-get install python3-torchvision)\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
