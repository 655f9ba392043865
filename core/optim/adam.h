// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), bias-corrected,
// with eps outside the square root, as torch.optim.Adam / AdamW. Plain math on spans.
#pragma once

#include <cstdint>
#include <span>

namespace aiacc::optim {

// Per-step scalars of one Adam update, computed in double as PyTorch does and rounded to float
// once; shared by the CPU update below and the GPU kernel (core/cuda/kernels/optimizer_update.h).
struct AdamStepScalars {
  float step_size;          // lr / (1 - beta1^t)
  float correction2_sqrt;   // sqrt(1 - beta2^t)
  float one_minus_b1;
  float b2;
  float one_minus_b2;
  float epsilon;
  float wd;                 // Adam's L2 coefficient
  float shrink;             // AdamW: 1 - lr * wd
  bool decoupled;
};

struct AdamRule {
  double beta1 = 0.9;         // decay of the first moment (exp_avg)
  double beta2 = 0.999;       // decay of the second moment (exp_avg_sq)
  double eps = 1e-8;          // added to sqrt(v_hat) for stability
  double weight_decay = 0.0;  // Adam: g += wd*w; AdamW: w *= 1 - lr*wd before the step
  bool decoupled = false;     // false: Adam, true: AdamW

  // Floats of state per weight element: exp_avg and exp_avg_sq.
  int state_per_element() const { return 2; }

  // One step on equal-length spans. `step` is 1-based and drives the bias corrections
  // 1 - beta^step; a sparse row passes its own step count (lazy Adam).
  //   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2
  //   w -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
  void update(std::span<float> w, std::span<const float> g, std::span<float> exp_avg,
              std::span<float> exp_avg_sq, std::int64_t step, double lr) const;

  // The scalars of step `step` (1-based) at learning rate `lr`.
  AdamStepScalars step_scalars(std::int64_t step, double lr) const;
};

}  // namespace aiacc::optim
