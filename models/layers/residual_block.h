// A residual block: y = relu(main(x) + shortcut(x)), where the shortcut is the identity or a
// projection (typically a strided 1x1 Conv2d + BatchNorm). The composite ResNet is built from;
// it knows nothing about which layers its paths hold (see models/resnet_blocks.h for the basic
// and bottleneck blocks).
// Legend: N = batch, C = channels, H x W = spatial size (the paths must agree on the output).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/layers/layer.h"
#include "models/layers/sequential.h"

namespace aiacc::models {

class ResidualBlock : public Layer {
 public:
  // Takes ownership of both paths. `shortcut` null means the identity, so `main` must then keep
  // the input's shape. `name` is the block's prefix ("layer2.0"); the paths' layers carry their
  // own full names.
  ResidualBlock(std::string name, std::unique_ptr<Sequential> main,
                std::unique_ptr<Sequential> shortcut);

  // input [N, C, H, W] -> relu(main(input) + shortcut(input)). Throws InternalError naming the
  // block when the two paths disagree on the output shape.
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output (the forward's output shape) -> dL/dinput = the sum of both paths' input
  // gradients. Differentiates the shortcut first, then the main path, so grad_ready() fires in
  // reverse forward order (parameters() lists main, then shortcut); each parameter's fires once.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  // Main path's parameters, then the shortcut's (torchvision's state-dict order).
  std::vector<Parameter*> parameters() override;
  std::vector<std::pair<std::string, Tensor>> buffers() override;
  std::string name() const override { return name_; }

  void to(Device device, const ActivationFormat& format = {}) override {
    main_->to(device, format);
    if (shortcut_) shortcut_->to(device, format);
  }
  Sequential& main_path() { return *main_; }
  Sequential* shortcut() { return shortcut_.get(); }  // null for the identity

 private:
  std::string name_;
  std::unique_ptr<Sequential> main_;
  std::unique_ptr<Sequential> shortcut_;
  Tensor output_;  // the last forward's output: its sign is the ReLU mask backward needs
};

}  // namespace aiacc::models
