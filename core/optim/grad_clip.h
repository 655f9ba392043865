// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_, Keras' global_clipnorm):
// before an optimiser step, every gradient is scaled by clip_factor(||g||, max_norm), where
// ||g|| is the L2 norm of all of them together, so a step never moves the parameters further
// than a gradient of norm max_norm would. The device counterpart of sum_of_squares is
// DeviceOps::sum_of_squares (one wait for every tensor).
#pragma once

#include <span>

#include "core/optim/layer_norms.h"  // sum_of_squares

namespace aiacc::optim {

// min(1, max_norm / (norm + 1e-6)), PyTorch's factor (the 1e-6 keeps a zero gradient finite);
// 1 when max_norm <= 0 (clipping off). A NaN norm gives NaN: callers check finiteness first.
double clip_factor(double norm, double max_norm);

// values *= factor (for the CPU; DeviceOps::multiply_and_check on a device).
void scale_in_place(std::span<float> values, float factor);

}  // namespace aiacc::optim
