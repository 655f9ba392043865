// The ResNet model: builds the trunk (models/resnet_architecture.h), adds pooling and the
// classifier, initialises like torchvision, and registers itself as "resnet".
#include "models/resnet.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/log.h"
#include "core/util/random.h"
#include "models/layers/linear.h"
#include "models/layers/pooling.h"

namespace aiacc::models {
namespace {

// Seed streams, so that the conv draws, the layers' own draws and the classifier never overlap.
constexpr std::uint64_t kConvInitStream = 0x7265736e6574ull;  // "resnet"
constexpr std::uint64_t kClassifierSeedOffset = 1u << 20;

// torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out),
// which keeps activations' scale through the ReLU stack at the start of training.
void init_conv(Conv2d& conv, std::uint64_t seed, std::uint64_t index) {
  Tensor& w = conv.weight().value();
  const std::int64_t fan_out = w.dim(0) * w.dim(2) * w.dim(3);
  const double std_dev = std::sqrt(2.0 / static_cast<double>(fan_out));
  Rng rng(seed ^ kConvInitStream, index);
  Tensor draws = Tensor::empty(w.shape(), DType::f64);
  for (double& v : draws.span<double>()) v = rng.normal() * std_dev;
  w.copy_from(w.dtype() == DType::f64 ? draws : draws.to(w.dtype()));
}

}  // namespace

void ResNet::Options::validate(const config::Node& node) const {
  const std::string problem = resnet_choice_problem(choice());
  if (!problem.empty()) node.fail(problem);
}

ResNet::ResNet(const Options& options, const ModelContext& context)
    : example_shape_(context.input.example_shape), net_("resnet"), loss_(options.label_smoothing) {
  if (context.input.task != Task::classification) {
    throw ConfigError("model resnet: needs a classification task (the data is binary)");
  }
  if (context.input.num_classes < 2) {
    throw ConfigError(fmt::format("model resnet: classification needs at least 2 classes, the "
                                  "data has {}", context.input.num_classes));
  }
  arch_ = resolve_resnet(options.choice(), example_shape_);
  log::get("model")->info("resnet depth {}: {}", options.depth, arch_.str());
  ResNetInitTargets targets;
  build_resnet_trunk(arch_, example_shape_[0], context.seed, context.dtype, net_, targets);
  // [N, F, H', W'] -> [N, F]: the classifier works at any input resolution.
  net_.add(std::make_unique<GlobalAvgPool>("avgpool"));
  net_.add(std::make_unique<Linear>("fc", arch_.feature_channels(), context.input.num_classes,
                                    /*bias=*/true, context.seed + kClassifierSeedOffset,
                                    context.dtype));

  for (std::size_t i = 0; i < targets.convs.size(); ++i) {
    init_conv(*targets.convs[i], context.seed, i);
  }
  // Each block then starts as the identity, which helps large-batch training (Goyal et al.).
  if (options.zero_init_residual) {
    for (BatchNorm* norm : targets.residual_norms) norm->weight().value().zero();
  }
  if (context.cross_replica_sum) {
    for (BatchNorm* norm : targets.norms) norm->set_cross_replica_sum(context.cross_replica_sum);
  }
}

double ResNet::forward(const Batch& batch, bool training) {
  const std::int64_t n = batch.inputs.dim(0);
  const Shape image{n, example_shape_[0], example_shape_[1], example_shape_[2]};
  if (batch.inputs.numel() != image.numel()) {
    throw InternalError(fmt::format("model resnet: inputs {} do not hold {} images of {}",
                                    batch.inputs.shape().str(), n, example_shape_.str()));
  }
  Tensor input = batch.inputs.reshape(image);
  if (!format_.is_default() && !input.device().is_cpu()) {
    // The batch arrives f32 NCHW; the trunk runs in its own format from the stem on.
    AIACC_CHECK(input.dtype() == DType::f32, "model resnet: inputs are {}, expected f32", dtype_name(input.dtype()));
    Tensor converted = Tensor::empty(image, format_.dtype, input.device());
    device_ops(input.device())
        .to_activation_format(input.device(), format_, image[0], image[1], image[2] * image[3], input.data<float>(),
                              converted.raw_data());
    input = converted;
  }
  logits_ = net_.forward(input, training);
  return loss_.forward(logits_, batch.labels);
}

void ResNet::to(Device device, const ActivationFormat& format) {
  if (device.is_cpu() && !format.is_default()) {
    throw ConfigError(fmt::format("job.precision: activations {} run on a GPU only (set job.device: cuda)",
                                  format.str()));
  }
  if (format.dtype != DType::f32 && format.dtype != DType::bf16 && format.dtype != DType::f16) {
    throw ConfigError(fmt::format("job.precision: activations {}: f32, bf16 or f16", format.str()));
  }
  net_.to(device, format);
  format_ = format;
}

void ResNet::backward() {
  Tensor dlogits = loss_.backward();
  if (loss_scale_ != 1.0f) {
    if (dlogits.device().is_cpu()) {
      for (float& v : dlogits.span<float>()) v *= loss_scale_;
    } else {
      const std::pair<float*, std::int64_t> all{dlogits.data<float>(), dlogits.numel()};
      (void)device_ops(dlogits.device()).multiply_and_check(dlogits.device(), {&all, 1}, loss_scale_);
    }
  }
  net_.backward(dlogits, /*need_input_grad=*/false);
}

AIACC_REGISTER_MODEL("resnet", ResNet);

}  // namespace aiacc::models
