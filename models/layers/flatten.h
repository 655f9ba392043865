// Flatten: [N, d1, d2, ...] -> [N, d1*d2*...], as a view sharing the input's storage (no copy).
// Typically between convolutional features and a Linear classifier.
#pragma once

#include <string>

#include "models/layers/layer.h"

namespace aiacc::models {

class Flatten : public Layer {
 public:
  explicit Flatten(std::string name) : name_(std::move(name)) {}
  // input of rank >= 1 -> [N, rest] (rank-1 input [N] becomes [N, 1]). Shares storage.
  Tensor forward(const Tensor& input, bool training) override;
  // grad_output [N, rest] -> a view of it with the input's shape.
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Shape input_shape_;  // of the last forward
};

}  // namespace aiacc::models
