// What a `resnet` option block means: the ResNet family (ImageNet-style with 4 stages or
// CIFAR-style with 3), the block type, blocks per stage, base width and stem, resolved and
// checked once; and the builders of the stem and the residual stages, with torchvision's layer
// names (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, ...).
// Legend: N = batch, C = channels, H x W = spatial size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/sequential.h"

namespace aiacc::models {

enum class ResNetBlock {
  basic,       // 3x3 conv, 3x3 conv; expansion 1
  bottleneck,  // 1x1 reduce, 3x3 (strided, torchvision v1.5), 1x1 expand; expansion 4
};

struct ResNetArchitecture {
  bool imagenet_style = true;   // 4 stages (18, 34, 50, ...) or CIFAR's 3 (6n+2, 9n+2)
  ResNetBlock block = ResNetBlock::basic;
  std::vector<int> blocks_per_stage;  // one entry per stage
  std::int64_t width = 64;            // planes of the first stage; stage s has width * 2^s
  bool imagenet_stem = true;          // 7x7/2 conv + 3x3/2 max-pool; else a 3x3/1 conv
  int expansion() const { return block == ResNetBlock::bottleneck ? 4 : 1; }
  // Channels of the features before global average pooling.
  std::int64_t feature_channels() const;
  std::string str() const;  // "imagenet-style, bottleneck [3, 4, 6, 3], width 64, imagenet stem"
};

// The user-facing choices, as in ResNet::Options (strings already checked for membership).
struct ResNetChoice {
  std::int64_t depth = 18;
  std::string style = "auto";  // auto | imagenet | cifar
  std::string block = "auto";  // auto | basic | bottleneck
  std::int64_t width = 0;      // 0: the family's default
  std::string stem = "auto";   // auto | small | imagenet
};

// "" when `choice` names a network, else why not (e.g. "depth 21 is not 6n+2 ...").
std::string resnet_choice_problem(const ResNetChoice& choice);

// Resolves `choice` for images of `example_shape` [C, H, W]. Throws ConfigError with the
// reason when the choice names no network (see resnet_choice_problem).
ResNetArchitecture resolve_resnet(const ResNetChoice& choice, const Shape& example_shape);

// The layers whose initialisation the model adjusts after building.
struct ResNetInitTargets {
  std::vector<Conv2d*> convs;             // every convolution, in forward order
  std::vector<BatchNorm*> residual_norms; // the last batch norm of each block's main path
  std::vector<BatchNorm*> norms;          // every batch norm, in forward order
};

// Appends the stem (conv1, bn1, relu[, maxpool]) and every stage (layer1 ...) to `net` for
// `in_channels`-channel images; the result is [N, feature_channels(), H', W']. Layer seeds are
// drawn from `seed`; convolutions have no bias. Collects the layers to initialise in `targets`.
void build_resnet_trunk(const ResNetArchitecture& arch, std::int64_t in_channels,
                        std::uint64_t seed, DType dtype, Sequential& net,
                        ResNetInitTargets& targets);

}  // namespace aiacc::models
