// A trainable tensor as models expose it to the rest of the framework. Models fire
// grad_ready() the moment a gradient is final during backward; the trainer subscribes the ring
// (dense) or the parameter servers (sparse) through hooks, so models never know how gradients
// are synchronised (shared/DESIGN.md §3).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace aiacc {

enum class ParamKind {
  dense,   // value and grad have the same shape; synchronised by allreduce
  sparse,  // an embedding table addressed by 64-bit ids; gradients are rows per unique id
};

// Gradient of a sparse parameter: one row per unique id touched by the batch.
struct SparseGrad {
  std::vector<std::int64_t> ids;  // unique, in first-seen order
  Tensor rows;                    // [ids.size(), row_dim]
};

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  // `value` for a dense parameter is the whole tensor; for a sparse one, [0, row_dim] or the
  // rows the current batch touched (the table itself lives in an embedding store).
  Parameter(std::string name, Tensor value, ParamKind kind = ParamKind::dense)
      : name_(std::move(name)), value_(std::move(value)), kind_(kind) {
    if (kind_ == ParamKind::dense) grad_ = Tensor::zeros(value_.shape(), value_.dtype(), value_.device());
  }
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const { return name_; }
  ParamKind kind() const { return kind_; }
  Tensor& value() { return value_; }
  const Tensor& value() const { return value_; }
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }
  SparseGrad& sparse_grad() { return sparse_grad_; }

  // Moves the value to `device` (a copy) and gives a dense parameter a zeroed gradient there.
  // Layers read both through this object, so they run where it now is.
  void to(Device device) {
    if (value_.device() == device) return;
    value_ = value_.to(device);
    if (kind_ == ParamKind::dense) grad_ = Tensor::zeros(value_.shape(), value_.dtype(), device);
  }

  // Weight decay applies to this parameter (false for biases and normalisation scales).
  bool decays() const { return decays_; }
  void set_decays(bool decays) { decays_ = decays; }

  // Hooks run in registration order on the thread that calls grad_ready().
  void add_grad_ready_hook(GradReadyHook hook) { hooks_.push_back(std::move(hook)); }
  void grad_ready() {
    for (auto& hook : hooks_) hook(*this);
  }

 private:
  std::string name_;
  Tensor value_;
  Tensor grad_;
  SparseGrad sparse_grad_;
  ParamKind kind_;
  bool decays_ = true;
  std::vector<GradReadyHook> hooks_;
};

}  // namespace aiacc
