// "resnet": residual networks for image classification (He et al. 2016), torchvision-compatible.
// ImageNet-style depths 18, 34 (basic blocks), 50, 101, 152 (bottleneck blocks, stride on the
// 3x3 conv as in torchvision v1.5) with 4 stages; CIFAR-style depths 6n+2 (basic) or 9n+2
// (bottleneck) with 3 stages. Batch norm after every conv, global average pooling, a Linear
// classifier, softmax cross-entropy. Parameter and buffer names are torchvision's state-dict
// names (conv1.weight, layer1.0.bn1.running_mean, layer2.0.downsample.0.weight, fc.bias, ...),
// so dense checkpoints load into torchvision.models.resnet*.
//   model: {type: resnet, resnet: {depth: 20, label_smoothing: 0.1}}
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config/schema.h"
#include "models/layers/loss.h"
#include "models/layers/sequential.h"
#include "models/model.h"
#include "models/resnet_architecture.h"

namespace aiacc::models {

class ResNet final : public Model {
 public:
  struct Options {
    std::int64_t depth = 18;
    std::string style = "auto";
    std::string block = "auto";
    std::int64_t width = 0;
    std::string stem = "auto";
    bool zero_init_residual = false;
    double label_smoothing = 0.0;

    template <class V>
    void visit(V& v) {
      v.field("depth", depth,
              "layers with weights: 18, 34, 50, 101, 152 (imagenet-style) or 6n+2 / 9n+2 "
              "(cifar-style basic / bottleneck, e.g. 8, 20, 56)",
              config::in_range<std::int64_t>(8, 2000));
      v.field("style", style,
              "auto (imagenet for 18, 34, 50, 101, 152, else cifar) | imagenet (4 stages) | "
              "cifar (3 stages of width, 2x, 4x)",
              config::one_of({"auto", "imagenet", "cifar"}));
      v.field("block", block,
              "auto (the depth's standard block: bottleneck for imagenet-style 50+, else "
              "basic) | basic | bottleneck",
              config::one_of({"auto", "basic", "bottleneck"}));
      v.field("width", width,
              "channels of the first stage, doubled per stage (0: 64 imagenet-style, 16 "
              "cifar-style)",
              config::in_range<std::int64_t>(0, 4096));
      v.field("stem", stem,
              "auto (small for images of at most 64 pixels a side) | small (3x3 stride-1 conv) "
              "| imagenet (7x7 stride-2 conv + 3x3 stride-2 max-pool)",
              config::one_of({"auto", "small", "imagenet"}));
      v.field("zero_init_residual", zero_init_residual,
              "start the last batch-norm scale of each block at 0 (each block starts as the "
              "identity)");
      v.field("label_smoothing", label_smoothing,
              "cross-entropy target puts 1 - s on the label and s / classes on every class",
              config::in_range(0.0, 1.0));
    }
    // Checks that depth, style and block name a network (ConfigError at the config's location).
    void validate(const config::Node& node) const;
    ResNetChoice choice() const { return {depth, style, block, width, stem}; }
  };

  // Builds the network for context.input (a classification task over [C, H, W] images,
  // C = example_shape[0]) in context.dtype, deterministically from context.seed: convolutions
  // drawn from N(0, 2 / (out_channels * K * K)) (torchvision's kaiming_normal_, fan_out),
  // batch-norm scales 1 (0 for each block's last with zero_init_residual) and shifts 0, the
  // classifier uniform in +-1/sqrt(features). Throws ConfigError for options that name no
  // network or data it cannot classify.
  ResNet(const Options& options, const ModelContext& context);

  // In forward order, named like torchvision's state dict.
  std::vector<Parameter*> parameters() override { return net_.parameters(); }
  // batch.inputs [N, C, H, W] (or [N, C*H*W]), labels [N] -> mean cross-entropy.
  double forward(const Batch& batch, bool training) override;
  Tensor outputs() const override { return logits_; }  // [N, num_classes]
  // Overwrites every parameter's grad; grad_ready() fires once each, in reverse forward order.
  void backward() override;
  // Every batch norm's running_mean, running_var and num_batches_tracked, in forward order.
  std::vector<std::pair<std::string, Tensor>> buffers() override { return net_.buffers(); }
  // On a device `format` may be bf16 channels-last (mixed precision); the CPU runs f32 NCHW.
  void to(Device device, const ActivationFormat& format = {}) override;
  void set_loss_scale(float scale) override { loss_scale_ = scale; }

  const ResNetArchitecture& architecture() const { return arch_; }
  // The layers from images to logits, for callers that need more than the Model API (input
  // gradients for saliency maps or adversarial examples, tests). forward() takes [N, C, H, W].
  Sequential& network() { return net_; }

 private:
  ResNetArchitecture arch_;
  Shape example_shape_;
  ActivationFormat format_;  // of the trunk's activations
  float loss_scale_ = 1.0f;
  Sequential net_;
  SoftmaxCrossEntropy loss_;
  Tensor logits_;
};

}  // namespace aiacc::models
