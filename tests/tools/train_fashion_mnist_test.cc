// End to end on real data: the README's default job (configs/mlp_fashion_mnist.yaml) reaches the
// accuracy an MLP is known to reach on Fashion-MNIST (published: 0.883 for MLP 256-128-100),
// and its metrics file records the run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace {

TEST(TrainFashionMnist, DefaultJobReachesPublishedMlpAccuracy) {
  const char* root = std::getenv("AIACC_SOURCE_ROOT");
  std::filesystem::path source = root ? root : ".";
  ASSERT_TRUE(std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
      << "Fashion-MNIST is missing: run scripts/install-deps.sh (Debian dataset-fashion-mnist)";
  auto run_dir = std::filesystem::temp_directory_path() / "aiacc_fashion_mnist_e2e";
  std::filesystem::remove_all(run_dir);
  auto job = aiacc::trainer::load_job((source / "configs" / "mlp_fashion_mnist.yaml").string(),
                                      {"job.run_dir=" + run_dir.string()});
  aiacc::trainer::Trainer trainer(job);
  auto result = trainer.run();
  ASSERT_TRUE(result.last_eval.has_value());
  EXPECT_EQ(result.last_eval->examples, 10000);
  EXPECT_GE(result.last_eval->accuracy, 0.88);
  EXPECT_LT(result.last_train_loss, 0.5 * result.first_train_loss);

  std::ifstream metrics(run_dir / job.job.name / "metrics.jsonl");
  ASSERT_TRUE(metrics);
  int evals = 0;
  double last_accuracy = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == "eval") {
      ++evals;
      last_accuracy = record["accuracy"];
    }
  }
  EXPECT_EQ(evals, job.train.epochs);
  EXPECT_DOUBLE_EQ(last_accuracy, result.last_eval->accuracy);
}

}  // namespace
