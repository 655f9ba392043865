// Dropout layer (inverted dropout): in training each element is kept with probability 1 - p
// and scaled by 1/(1 - p); in eval mode it is the identity. Masks are reproducible: the k-th
// training forward of a layer draws its mask from (seed, step = k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/layers/layer.h"

namespace aiacc::models {

class Dropout : public Layer {
 public:
  // p in [0, 1]: the probability of dropping an element. No parameters. Any f32/f64 input.
  Dropout(std::string name, double p, std::uint64_t seed);

  // Training: y = x * mask / (1 - p) with a fresh mask for the current step, then the step
  // advances. Eval (or p == 0): returns the input itself (no copy).
  Tensor forward(const Tensor& input, bool training) override;
  // Applies the last forward's mask and scale to grad_output (identity after an eval forward).
  Tensor backward(const Tensor& grad_output, bool need_input_grad = true) override;
  std::string name() const override { return name_; }

  // The step the next training forward uses; set it when resuming so masks continue exactly.
  std::uint64_t step() const { return static_cast<std::uint64_t>(*step_.data<std::int64_t>()); }
  void set_step(std::uint64_t step) { *step_.data<std::int64_t>() = static_cast<std::int64_t>(step); }
  // "<name>.rng_step": the step counter as an i64 scalar, so checkpoints restore the masks.
  std::vector<std::pair<std::string, Tensor>> buffers() override { return {{name_ + ".rng_step", step_}}; }
  double p() const { return p_; }

 private:
  std::string name_;
  double p_;
  std::uint64_t seed_;
  Tensor step_ = Tensor::zeros(Shape{}, DType::i64);
  bool masked_ = false;             // whether the last forward applied a mask
  Shape shape_;                     // the last forward's input shape
  DType dtype_ = DType::f32;        // the last forward's input dtype
  std::vector<std::uint8_t> mask_;  // [numel] of the last training forward
};

}  // namespace aiacc::models
