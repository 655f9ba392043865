// Dynamic loss scaling for fp16 training (as torch.cuda.amp.GradScaler): the loss is multiplied
// by scale() before backward so small fp16 gradients do not flush to zero; the gradients are
// then unscaled (unscale_gradients here, or cuda::launch_unscale_and_check on a GPU) and the
// step is skipped when any of them overflowed. The scale halves on every overflow and doubles
// after growth_interval clean steps. bf16 has fp32's range and needs no scaling.
#pragma once

#include <cstdint>
#include <span>

namespace aiacc::optim {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, PyTorch's default
  double growth_factor = 2.0;      // after growth_interval clean steps
  double backoff_factor = 0.5;     // after a step with an overflow
  std::int64_t growth_interval = 2000;
  double min_scale = 1.0;          // never below: a model that overflows at 1 has another problem
  double max_scale = 16777216.0;   // 2^24: beyond it fp32 gradients lose their low bits
  void validate() const;           // throws ConfigError naming the bad field
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScalerOptions options = {});

  float scale() const { return static_cast<float>(scale_); }
  float inverse_scale() const { return static_cast<float>(1.0 / scale_); }

  // Records one step's outcome; returns whether the optimiser step should run (false when a
  // gradient overflowed: the step is skipped and the scale backs off).
  bool update(bool found_nonfinite);

  std::int64_t skipped_steps() const { return skipped_; }
  std::int64_t clean_steps_in_a_row() const { return clean_in_a_row_; }

  // Checkpointed state: the scale and the clean steps since the last change.
  void restore(double scale, std::int64_t clean_in_a_row);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t clean_in_a_row_ = 0;
  std::int64_t skipped_ = 0;
};

// grads *= inv_scale; returns whether any gradient was an infinity or NaN before scaling.
// The CPU reference of cuda::launch_unscale_and_check.
bool unscale_gradients(std::span<float> grads, float inv_scale);

}  // namespace aiacc::optim
