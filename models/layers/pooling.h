// Pooling layers over core/kernels/pooling: MaxPool2d, AvgPool2d (count_include_pad=true) and
// GlobalAvgPool ([N, C, H, W] -> [N, C]). No parameters; f32 and f64 inputs.
// Legend: N = batch, C = channels, H x W input, OH x OW output (floor mode, like PyTorch).
#pragma once

#include <cstdint>
#include <string>

#include "core/kernels/pooling.h"
#include "models/layers/layer.h"

namespace aiacc::models {

// Square window `kernel`, `stride`, implicit padding (0 <= padding <= kernel / 2).
// Backward routes each output gradient to the first maximum of its window in row-major scan
// order (see core/kernels/pooling.h for the tie and NaN rules).
class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::string name, int kernel, int stride, int padding = 0);
  Tensor forward(const Tensor& input, bool training) override;  // [N, C, H, W] -> [N, C, OH, OW]
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }
  void to(Device, const ActivationFormat& format = {}) override { format_ = format; }

 private:
  std::string name_;
  kernels::Pool2dGeometry geometry_;  // of the last forward
  Tensor argmax_;                     // i64 [N, C, OH, OW] of the last forward (CPU)
  Tensor input_, output_;             // of the last forward (a device's backward reads them)
  DType dtype_ = DType::f32;
  Device device_;
  ActivationFormat format_;  // of the activations on a device
};

// Average over the window, padding counted as zeros (divisor kernel*kernel everywhere).
class AvgPool2d : public Layer {
 public:
  AvgPool2d(std::string name, int kernel, int stride, int padding = 0);
  Tensor forward(const Tensor& input, bool training) override;  // [N, C, H, W] -> [N, C, OH, OW]
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }
  void to(Device, const ActivationFormat& format = {}) override { format_ = format; }

 private:
  std::string name_;
  kernels::Pool2dGeometry geometry_;  // of the last forward
  DType dtype_ = DType::f32;
  Device device_;
  ActivationFormat format_;  // of the activations on a device
  Tensor input_, output_;  // of the last forward on a device (cuDNN's backward takes them)
  bool ready_ = false;  // a forward has run
};

// Mean over each channel's H x W plane: [N, C, H, W] -> [N, C].
class GlobalAvgPool : public Layer {
 public:
  explicit GlobalAvgPool(std::string name) : name_(std::move(name)) {}
  Tensor forward(const Tensor& input, bool training) override;
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }
  void to(Device, const ActivationFormat& format = {}) override { format_ = format; }

 private:
  std::string name_;
  Shape input_shape_;  // of the last forward
  DType dtype_ = DType::f32;
  Device device_;
  ActivationFormat format_;  // of the activations on a device
};

}  // namespace aiacc::models
