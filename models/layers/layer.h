// A differentiable operation with its parameters, the unit models are built from.
// Contract:
//  - forward() caches what backward() needs; call backward() at most once per forward().
//  - backward() OVERWRITES (not accumulates) each parameter's gradient, then calls that
//    parameter's grad_ready() exactly once, so communication can start while earlier layers
//    are still differentiating (shared/DESIGN.md §3).
//  - Tensors are f32 in training; f64 is supported by every layer for gradient checks.
// Not thread-safe: one layer instance belongs to one training thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/device_ops.h"
#include "core/parameter.h"
#include "core/tensor.h"

namespace aiacc::models {

class Layer {
 public:
  virtual ~Layer() = default;
  virtual Tensor forward(const Tensor& input, bool training) = 0;
  // Returns dL/dinput, or an undefined Tensor when `need_input_grad` is false (first layer).
  virtual Tensor backward(const Tensor& grad_output, bool need_input_grad = true) = 0;
  virtual std::vector<Parameter*> parameters() { return {}; }
  // Non-trainable state a checkpoint must hold (e.g. batch-norm running statistics), as named
  // tensors sharing the layer's storage.
  virtual std::vector<std::pair<std::string, Tensor>> buffers() { return {}; }
  // Moves the layer's parameters (and state it keeps on the compute device) to `device`; it then
  // takes inputs there (DeviceOps, core/device_ops.h), its 4-D activations in `format` (f32
  // NCHW, or the mixed-precision bf16 channels-last; the CPU runs the default only).
  // Composites move their children.
  virtual void to(Device device, const ActivationFormat& format = {}) {
    (void)format;
    for (Parameter* p : parameters()) p->to(device);
  }
  virtual std::string name() const = 0;
};

}  // namespace aiacc::models
