// train.clip_grad_norm through the trainer against a float64 reference: one SGD step (no
// momentum) moves every parameter by -lr x gradient, so the unclipped step gives the gradient,
// its global norm, and the step a clipped run must take: the same direction, scaled by
// max_norm / (norm + 1e-6). A bound above the norm changes nothing, bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace aiacc::trainer {
namespace {

constexpr double kLr = 0.05;

JobOptions one_step_job(const std::filesystem::path& dir, double clip) {
  std::filesystem::create_directories(dir);
  const auto path = dir / "job.yaml";
  std::ofstream(path) << "job: {name: clip, run_dir: " << dir.string() << ", threads: 1, seed: 3}\n"
                      << "model: {type: mlp, mlp: {hidden: [32, 16]}}\n"
                      << "data:\n  batch_size: 32\n"
                      << "  train: {type: synthetic_images, synthetic_images: {size: 256, height: 8, width: 8}}\n"
                      << "  test: {type: synthetic_images, synthetic_images: {size: 64, height: 8, width: 8}}\n"
                      << "optimizer: {type: sgd, lr: " << kLr << "}\n"
                      << "train: {max_steps: 1, log_every_steps: 1, eval_each_epoch: false, clip_grad_norm: " << clip
                      << ", checkpoint: {at_end: false, resume: never}}\n";
  return load_job(path.string(), {});
}

using Tensors = std::map<std::string, std::vector<float>>;

Tensors floats_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  Tensors out;
  for (const auto& [name, t] : named) {
    const Tensor host = t.to(Device::cpu());
    out[name].assign(host.data<float>(), host.data<float>() + host.numel());
  }
  return out;
}

struct Step {
  Tensors before, after;
  TrainResult result;
};

Step one_step(const std::filesystem::path& dir, double clip) {
  std::filesystem::remove_all(dir);
  Trainer trainer(one_step_job(dir, clip));
  Step s;
  s.before = floats_of(trainer.model_tensors());
  s.result = trainer.run();
  s.after = floats_of(trainer.model_tensors());
  return s;
}

TEST(GradClipTraining, AClippedStepIsTheUnclippedOneScaledToTheBound) {
  const auto base = std::filesystem::temp_directory_path() / "aiacc_grad_clip_train";
  const Step free = one_step(base / "off", 0.0);
  // The gradient from the step itself, and its global norm in float64.
  long double squares = 0;
  for (const auto& [name, w0] : free.before) {
    const auto& w1 = free.after.at(name);
    for (std::size_t i = 0; i < w0.size(); ++i) {
      const long double g = (static_cast<long double>(w0[i]) - w1[i]) / kLr;
      squares += g * g;
    }
  }
  const double norm = std::sqrt(static_cast<double>(squares));
  ASSERT_GT(norm, 0.0);

  // A bound above the norm: the norm is measured (and reported), nothing is clipped.
  const Step loose = one_step(base / "loose", 2 * norm);
  EXPECT_EQ(loose.result.clipped_steps, 0);
  EXPECT_NEAR(loose.result.last_grad_norm, norm, 1e-4 * norm);
  for (const auto& [name, w] : free.after) {
    EXPECT_EQ(0, std::memcmp(w.data(), loose.after.at(name).data(), w.size() * sizeof(float))) << name;
  }

  // A bound of a quarter of the norm: every parameter moves by a quarter of its free step.
  const double bound = norm / 4;
  const Step clipped = one_step(base / "clipped", bound);
  EXPECT_EQ(clipped.result.clipped_steps, 1);
  const double factor = bound / (norm + 1e-6);
  double worst = 0;
  for (const auto& [name, w0] : free.before) {
    EXPECT_EQ(clipped.before.at(name), w0) << name << ": the runs start from different weights";
    const auto& w_free = free.after.at(name);
    const auto& w_clipped = clipped.after.at(name);
    for (std::size_t i = 0; i < w0.size(); ++i) {
      const double expected = static_cast<double>(w0[i]) + factor * (static_cast<double>(w_free[i]) - w0[i]);
      worst = std::max(worst, std::fabs(w_clipped[i] - expected) / (std::fabs(w0[i]) + 1e-3));
    }
  }
  EXPECT_LT(worst, 1e-5);

  // The train record says what the step's norm was and that it was clipped.
  std::ifstream metrics(base / "clipped" / "clip" / "metrics.jsonl");
  bool found = false;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("kind", "") != "train") continue;
    found = true;
    EXPECT_NEAR(record.at("grad_norm").get<double>(), norm, 1e-4 * norm);
    EXPECT_EQ(record.at("clipped_steps").get<int>(), 1);
  }
  EXPECT_TRUE(found);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace aiacc::trainer
