// The path a user takes to extend the framework: a model class written outside models/,
// registered with one macro, selected by `model.type` in a YAML job, and trained by the trainer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/config/schema.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "models/model.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/trainer.h"

namespace {

// Multinomial logistic regression: one Linear layer and softmax cross-entropy.
class UserSoftmaxRegression final : public aiacc::models::Model {
 public:
  struct Options {
    bool bias = true;
    template <class V>
    void visit(V& v) {
      v.field("bias", bias, "learn a bias per class");
    }
  };

  UserSoftmaxRegression(const Options& options, const aiacc::models::ModelContext& context)
      : linear_("linear", context.input.example_shape.numel(), context.input.num_classes,
                options.bias, context.seed, context.dtype) {}

  std::vector<aiacc::Parameter*> parameters() override { return linear_.parameters(); }

  double forward(const aiacc::Batch& batch, bool training) override {
    const std::int64_t n = batch.inputs.dim(0);
    logits_ = linear_.forward(batch.inputs.reshape({n, batch.inputs.numel() / n}), training);
    return loss_.forward(logits_, batch.labels);
  }
  aiacc::Tensor outputs() const override { return logits_; }
  void backward() override { linear_.backward(loss_.backward(), /*need_input_grad=*/false); }

 private:
  aiacc::models::Linear linear_;
  aiacc::models::SoftmaxCrossEntropy loss_;
  aiacc::Tensor logits_;
};

AIACC_REGISTER_MODEL("user_softmax_regression", UserSoftmaxRegression);

TEST(UserModel, RegisteredOutsideModelsTrainsFromAYamlJob) {
  auto dir = std::filesystem::temp_directory_path() / "aiacc_user_model_test";
  std::filesystem::remove_all(dir);  // a previous run's checkpoint would be resumed
  std::filesystem::create_directories(dir);
  auto path = dir / "job.yaml";
  std::ofstream(path) << "job: {name: user_model, run_dir: " << dir.string() << ", threads: 1}\n"
                         "model: {type: user_softmax_regression, user_softmax_regression: {bias: true}}\n"
                         "data:\n"
                         "  batch_size: 32\n"
                         "  train: {type: synthetic_images, synthetic_images: {size: 1024}}\n"
                         "  test: {type: synthetic_images, synthetic_images: {size: 256}}\n"
                         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                         "train: {epochs: 3, log_every_steps: 8}\n";
  aiacc::trainer::JobOptions job = aiacc::trainer::load_job(path.string(), {});
  aiacc::trainer::Trainer trainer(job);
  aiacc::trainer::TrainResult result = trainer.run();
  ASSERT_TRUE(result.last_eval.has_value());
  EXPECT_LT(result.last_train_loss, 0.7 * result.first_train_loss);
  // 10 classes: chance is 0.1.
  EXPECT_GT(result.last_eval->accuracy, 0.5);
  EXPECT_TRUE(std::filesystem::exists(dir / "user_model" / "metrics.jsonl"));
}

TEST(UserModel, ItsOptionsAreValidatedLikeBuiltins) {
  auto doc = aiacc::config::Document::from_string(
      "model: {type: user_softmax_regression, user_softmax_regression: {bias: maybe}}\n", "u.yaml");
  EXPECT_THROW(aiacc::config::read<aiacc::trainer::JobOptions>(doc.root()), aiacc::ConfigError);
}

}  // namespace
