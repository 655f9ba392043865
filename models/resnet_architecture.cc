// ResNet architecture resolution (depth -> stages and block type) and the builders of the stem,
// the basic and bottleneck blocks and the stages.
#include "models/resnet_architecture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "models/layers/activation.h"
#include "models/layers/pooling.h"
#include "models/layers/residual_block.h"

namespace aiacc::models {
namespace {

// Adds a batch norm (PyTorch's momentum and eps) and records it for the model's set-up.
BatchNorm* add_norm(Sequential& seq, std::string name, std::int64_t channels, DType dtype,
                    ResNetInitTargets& targets) {
  auto* norm = seq.add(std::make_unique<BatchNorm>(std::move(name), channels, 0.1, 1e-5, dtype));
  targets.norms.push_back(norm);
  return norm;
}

struct ImagenetDepth {
  std::int64_t depth;
  ResNetBlock block;
  std::vector<int> blocks_per_stage;
};

// The torchvision family (He et al. 2016, table 1).
const std::vector<ImagenetDepth>& imagenet_depths() {
  static const std::vector<ImagenetDepth> depths = {
      {18, ResNetBlock::basic, {2, 2, 2, 2}},
      {34, ResNetBlock::basic, {3, 4, 6, 3}},
      {50, ResNetBlock::bottleneck, {3, 4, 6, 3}},
      {101, ResNetBlock::bottleneck, {3, 4, 23, 3}},
      {152, ResNetBlock::bottleneck, {3, 8, 36, 3}},
  };
  return depths;
}

const ImagenetDepth* find_imagenet_depth(std::int64_t depth) {
  for (const auto& d : imagenet_depths()) {
    if (d.depth == depth) return &d;
  }
  return nullptr;
}

const char* block_name(ResNetBlock block) {
  return block == ResNetBlock::basic ? "basic" : "bottleneck";
}

// Layers per CIFAR-style block: 2 convs (basic) or 3 (bottleneck); depth = 3 stages * n blocks *
// layers + stem conv + fc.
int cifar_layers_per_block(ResNetBlock block) { return block == ResNetBlock::basic ? 2 : 3; }

bool uses_imagenet_style(const ResNetChoice& choice) {
  if (choice.style != "auto") return choice.style == "imagenet";
  return find_imagenet_depth(choice.depth) != nullptr;
}

ResNetBlock cifar_block(const ResNetChoice& choice) {
  return choice.block == "bottleneck" ? ResNetBlock::bottleneck : ResNetBlock::basic;
}

// Appends a Conv2d without bias (the batch norm after it has the shift) and records it.
Conv2d* add_conv(Sequential& seq, std::string name, std::int64_t in, std::int64_t out, int kernel,
                 int stride, int padding, std::uint64_t seed, DType dtype,
                 ResNetInitTargets& targets) {
  Conv2d* conv = seq.add(std::make_unique<Conv2d>(std::move(name), in, out, kernel, stride,
                                                  padding, /*bias=*/false, seed, dtype));
  targets.convs.push_back(conv);
  return conv;
}

// One block `prefix` ("layer2.0") from `in` channels to planes * expansion, striding by `stride`.
std::unique_ptr<ResidualBlock> make_block(const ResNetArchitecture& arch, const std::string& prefix,
                                          std::int64_t in, std::int64_t planes, int stride,
                                          std::uint64_t& seed, DType dtype,
                                          ResNetInitTargets& targets) {
  const std::int64_t out = planes * arch.expansion();
  auto main = std::make_unique<Sequential>(prefix);
  auto name = [&](const char* layer) { return fmt::format("{}.{}", prefix, layer); };
  BatchNorm* last_norm = nullptr;
  if (arch.block == ResNetBlock::basic) {
    add_conv(*main, name("conv1"), in, planes, 3, stride, 1, seed++, dtype, targets);
    add_norm(*main, name("bn1"), planes, dtype, targets);
    main->add(std::make_unique<ReLU>(name("relu1")));
    add_conv(*main, name("conv2"), planes, planes, 3, 1, 1, seed++, dtype, targets);
    last_norm = add_norm(*main, name("bn2"), planes, dtype, targets);
  } else {
    // Stride on the 3x3 conv (torchvision's "ResNet v1.5"), not on the first 1x1.
    add_conv(*main, name("conv1"), in, planes, 1, 1, 0, seed++, dtype, targets);
    add_norm(*main, name("bn1"), planes, dtype, targets);
    main->add(std::make_unique<ReLU>(name("relu1")));
    add_conv(*main, name("conv2"), planes, planes, 3, stride, 1, seed++, dtype, targets);
    add_norm(*main, name("bn2"), planes, dtype, targets);
    main->add(std::make_unique<ReLU>(name("relu2")));
    add_conv(*main, name("conv3"), planes, out, 1, 1, 0, seed++, dtype, targets);
    last_norm = add_norm(*main, name("bn3"), out, dtype, targets);
  }
  targets.residual_norms.push_back(last_norm);

  // A projection (torchvision's "option B") only where the shape changes.
  std::unique_ptr<Sequential> shortcut;
  if (stride != 1 || in != out) {
    shortcut = std::make_unique<Sequential>(name("downsample"));
    add_conv(*shortcut, name("downsample.0"), in, out, 1, stride, 0, seed++, dtype, targets);
    add_norm(*shortcut, name("downsample.1"), out, dtype, targets);
  }
  return std::make_unique<ResidualBlock>(prefix, std::move(main), std::move(shortcut));
}

}  // namespace

std::int64_t ResNetArchitecture::feature_channels() const {
  const auto stages = static_cast<int>(blocks_per_stage.size());
  return width * (std::int64_t{1} << (stages - 1)) * expansion();
}

std::string ResNetArchitecture::str() const {
  return fmt::format("{}-style, {} blocks {}, width {}, {} stem",
                     imagenet_style ? "imagenet" : "cifar", block_name(block), blocks_per_stage,
                     width, imagenet_stem ? "imagenet" : "small");
}

std::string resnet_choice_problem(const ResNetChoice& choice) {
  if (choice.width < 0) return fmt::format("width {} is negative (0: the family's default)",
                                           choice.width);
  if (uses_imagenet_style(choice)) {
    const ImagenetDepth* d = find_imagenet_depth(choice.depth);
    if (d == nullptr) {
      return fmt::format("depth {} is not an imagenet-style depth (18, 34, 50, 101, 152)",
                         choice.depth);
    }
    if (choice.block != "auto" && choice.block != block_name(d->block)) {
      return fmt::format("imagenet-style depth {} uses {} blocks, not {}", choice.depth,
                         block_name(d->block), choice.block);
    }
    return {};
  }
  const ResNetBlock block = cifar_block(choice);
  const int per_block = cifar_layers_per_block(block);
  const std::int64_t stacked = choice.depth - 2;
  if (stacked < 3 * per_block || stacked % (3 * per_block) != 0) {
    return fmt::format(
        "depth {} is not a cifar-style depth for {} blocks ({}n+2 with n >= 1, e.g. {}, {}, {}); "
        "imagenet-style depths are 18, 34, 50, 101, 152",
        choice.depth, block_name(block), 3 * per_block, 3 * per_block + 2, 9 * per_block + 2,
        27 * per_block + 2);
  }
  return {};
}

ResNetArchitecture resolve_resnet(const ResNetChoice& choice, const Shape& example_shape) {
  const std::string problem = resnet_choice_problem(choice);
  if (!problem.empty()) throw ConfigError("model resnet: " + problem);
  if (example_shape.rank() != 3) {
    throw ConfigError(fmt::format("model resnet: needs images [C, H, W], the data gives {}",
                                  example_shape.str()));
  }
  ResNetArchitecture arch;
  arch.imagenet_style = uses_imagenet_style(choice);
  if (arch.imagenet_style) {
    const ImagenetDepth* d = find_imagenet_depth(choice.depth);
    arch.block = d->block;
    arch.blocks_per_stage = d->blocks_per_stage;
  } else {
    arch.block = cifar_block(choice);
    const int n = static_cast<int>((choice.depth - 2) / (3 * cifar_layers_per_block(arch.block)));
    arch.blocks_per_stage = {n, n, n};
  }
  arch.width = choice.width > 0 ? choice.width : (arch.imagenet_style ? 64 : 16);
  // Small images keep their resolution: a 7x7/2 conv and a 3x3/2 pool would shrink 28x28 to
  // 7x7 before the first block and lose most of what there is to see.
  const std::int64_t side = std::max(example_shape[1], example_shape[2]);
  arch.imagenet_stem = choice.stem == "auto" ? side > 64 : choice.stem == "imagenet";
  return arch;
}

void build_resnet_trunk(const ResNetArchitecture& arch, std::int64_t in_channels,
                        std::uint64_t seed, DType dtype, Sequential& net,
                        ResNetInitTargets& targets) {
  if (arch.imagenet_stem) {
    add_conv(net, "conv1", in_channels, arch.width, 7, 2, 3, seed++, dtype, targets);
  } else {
    add_conv(net, "conv1", in_channels, arch.width, 3, 1, 1, seed++, dtype, targets);
  }
  add_norm(net, "bn1", arch.width, dtype, targets);
  net.add(std::make_unique<ReLU>("relu"));
  if (arch.imagenet_stem) net.add(std::make_unique<MaxPool2d>("maxpool", 3, 2, 1));

  std::int64_t channels = arch.width;
  for (std::size_t stage = 0; stage < arch.blocks_per_stage.size(); ++stage) {
    const std::int64_t planes = arch.width << stage;
    for (int b = 0; b < arch.blocks_per_stage[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      net.add(make_block(arch, fmt::format("layer{}.{}", stage + 1, b), channels, planes, stride,
                         seed, dtype, targets));
      channels = planes * arch.expansion();
    }
  }
}

}  // namespace aiacc::models
