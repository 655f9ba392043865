// "mlp": a multi-layer perceptron over the flattened example (images or dense features):
// Linear -> ReLU (-> Dropout) per hidden layer, then a Linear classifier (or one logit for
// binary tasks), with softmax cross-entropy or binary cross-entropy.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "core/config/schema.h"
#include "core/error.h"
#include "models/layers/activation.h"
#include "models/layers/dropout.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "models/layers/sequential.h"
#include "models/model.h"

namespace aiacc::models {
namespace {

class Mlp final : public Model {
 public:
  struct Options {
    std::vector<std::int64_t> hidden = {256, 128};
    double dropout = 0.0;

    template <class V>
    void visit(V& v) {
      v.field("hidden", hidden, "units of each hidden layer, input to output",
              [](const std::vector<std::int64_t>& h) {
                for (auto units : h) if (units < 1) return std::string("expected positive unit counts");
                return std::string();
              });
      v.field("dropout", dropout, "dropout probability after each hidden layer",
              config::in_range(0.0, 0.95));
    }
  };

  Mlp(const Options& options, const ModelContext& context)
      : task_(context.input.task), dropout_(options.dropout), net_("mlp") {
    std::int64_t width = context.input.example_shape.numel();
    if (width <= 0) throw ConfigError("model mlp: the data has empty examples");
    if (task_ == Task::classification && context.input.num_classes < 2) {
      throw ConfigError("model mlp: classification needs at least 2 classes");
    }
    int index = 1;
    for (std::int64_t units : options.hidden) {
      net_.add(std::make_unique<Linear>(fmt::format("fc{}", index), width, units, true,
                                        context.seed + index, context.dtype));
      net_.add(std::make_unique<ReLU>(fmt::format("relu{}", index)));
      if (options.dropout > 0) {
        net_.add(std::make_unique<Dropout>(fmt::format("dropout{}", index), options.dropout,
                                           context.seed + 1000 + index));
      }
      width = units;
      ++index;
    }
    const std::int64_t outputs = task_ == Task::classification ? context.input.num_classes : 1;
    net_.add(std::make_unique<Linear>(fmt::format("fc{}", index), width, outputs, true,
                                      context.seed + index, context.dtype));
  }

  std::vector<Parameter*> parameters() override { return net_.parameters(); }
  std::vector<std::pair<std::string, Tensor>> buffers() override { return net_.buffers(); }
  void to(Device device, const ActivationFormat& format = {}) override {
    if (!format.is_default()) {
      throw ConfigError(fmt::format("job.precision: the mlp trains in f32 only (activations {} asked; "
                                    "mixed precision is for the resnet model)", format.str()));
    }
    if (!device.is_cpu() && dropout_ > 0) {
      throw ConfigError(fmt::format("job.device: {}: model.mlp.dropout {} runs on the CPU only (set 0)",
                                    device.str(), dropout_));
    }
    if (!device.is_cpu() && task_ != Task::classification) {
      throw ConfigError(fmt::format("job.device: {}: the mlp's binary task (binary cross-entropy) runs on "
                                    "the CPU only; classification data runs on devices", device.str()));
    }
    net_.to(device);
  }

  double forward(const Batch& batch, bool training) override {
    const std::int64_t n = batch.inputs.dim(0);
    Tensor x = batch.inputs.reshape(Shape{n, batch.inputs.numel() / std::max<std::int64_t>(n, 1)});
    logits_ = net_.forward(x, training);
    if (task_ == Task::classification) return cross_entropy_.forward(logits_, batch.labels);
    logits_ = logits_.reshape(Shape{n});
    return binary_.forward(logits_, batch.labels);
  }

  Tensor outputs() const override { return logits_; }

  void backward() override {
    Tensor grad = task_ == Task::classification ? cross_entropy_.backward() : binary_.backward();
    if (task_ == Task::binary) grad = grad.reshape(Shape{grad.numel(), 1});
    net_.backward(grad, /*need_input_grad=*/false);
  }

 private:
  Task task_;
  double dropout_;
  Sequential net_;
  SoftmaxCrossEntropy cross_entropy_;
  BinaryCrossEntropyWithLogits binary_;
  Tensor logits_;
};

}  // namespace

AIACC_REGISTER_MODEL("mlp", Mlp);

}  // namespace aiacc::models
