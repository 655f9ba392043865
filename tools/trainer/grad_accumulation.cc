#include "tools/trainer/grad_accumulation.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/device_ops.h"
#include "core/error.h"
#include "tools/trainer/device_gradients.h"

namespace aiacc::trainer {
namespace {

// sum += grad (into == sum) or grad += sum (into == grad), where the two live. Never waits for
// a device: a hook that waited would stall backward.
void add_into(Tensor& into, const Tensor& other) {
  const std::int64_t n = into.numel();
  if (into.device().is_cpu()) {
    float* y = into.data<float>();
    const float* x = other.data<float>();
    for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
    return;
  }
  device_ops(into.device()).add(into.device(), DType::f32, n, into.data<float>(), other.data<float>(),
                                into.data<float>());
}

}  // namespace

DenseGradAccumulator::DenseGradAccumulator(const std::vector<Parameter*>& params, int micro_batches)
    : micro_batches_(micro_batches) {
  if (micro_batches < 1) throw InternalError(fmt::format("gradient accumulation over {} micro-batches", micro_batches));
  for (Parameter* p : params) {
    if (p->grad().dtype() != DType::f32) {
      throw InternalError(fmt::format("gradient accumulation: '{}' has a {} gradient (f32 only)", p->name(),
                                      dtype_name(p->grad().dtype())));
    }
    auto slot = std::make_unique<Slot>();
    slot->param = p;
    Slot* held = slot.get();
    p->add_grad_ready_hook([this, held](Parameter&) { on_ready(*held); });
    slots_.push_back(std::move(slot));
  }
}

void DenseGradAccumulator::begin_micro_batch(int index) {
  if (index < 0 || index >= micro_batches_) {
    throw InternalError(fmt::format("micro-batch {} of {}", index, micro_batches_));
  }
  index_ = index;
  for (auto& slot : slots_) {
    if (index == 0) slot->summed = false;
    slot->fired = false;
  }
}

void DenseGradAccumulator::on_ready(Slot& slot) {
  if (micro_batches_ == 1 || finishing_) return;
  Tensor& grad = slot.param->grad();
  slot.fired = true;
  if (index_ + 1 == micro_batches_) {
    if (slot.summed) add_into(grad, slot.sum);  // the step's sum, for the hooks after this one
    return;
  }
  if (slot.sum.shape() != grad.shape() || slot.sum.device() != grad.device()) {
    slot.sum = Tensor::zeros(grad.shape(), DType::f32, grad.device());
    slot.summed = false;
  }
  if (slot.summed) {
    add_into(slot.sum, grad);
  } else {
    slot.sum.copy_from(grad);
    slot.summed = true;
  }
}

void DenseGradAccumulator::finish_step() {
  if (micro_batches_ == 1) return;
  finishing_ = true;
  try {
    for (auto& slot : slots_) {
      if (slot->fired || !slot->summed) continue;
      slot->param->grad().copy_from(slot->sum);
      slot->param->grad_ready();  // the all-reduce (or a device's host copy) takes it from here
    }
  } catch (...) {
    finishing_ = false;
    throw;
  }
  finishing_ = false;
}

std::int64_t scale_gradients(const std::vector<Parameter*>& params, float factor) {
  const DeviceGradients on_device = device_gradients(params, "scaling gradients");
  std::int64_t first_bad = -1;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor& grad = params[i]->grad();
    if (!grad.device().is_cpu()) continue;
    float* g = grad.data<float>();
    bool finite = true;
    for (std::int64_t j = 0; j < grad.numel(); ++j) {
      finite = finite && std::isfinite(g[j]);
      g[j] *= factor;
    }
    if (!finite && first_bad < 0) first_bad = static_cast<std::int64_t>(i);
  }
  if (on_device.device) {
    const std::int64_t bad = device_ops(*on_device.device).multiply_and_check(*on_device.device, on_device.values,
                                                                               factor);
    if (bad >= 0) {
      const auto index = static_cast<std::int64_t>(on_device.index[static_cast<std::size_t>(bad)]);
      first_bad = first_bad < 0 ? index : std::min(first_bad, index);
    }
  }
  return first_bad;
}

void SparseRowAccumulator::start_step_if_finished() {
  if (!finished_) return;
  ids_.clear();
  rows_.clear();
  row_of_.clear();
  skipped_ = false;
  finished_ = false;
}

void SparseRowAccumulator::add(std::span<const std::int64_t> ids, const float* rows) {
  start_step_if_finished();
  const auto dim = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* row = rows + i * dim;
    const auto [it, inserted] = row_of_.try_emplace(ids[i], ids_.size());
    if (inserted) {
      ids_.push_back(ids[i]);
      rows_.insert(rows_.end(), row, row + dim);
      continue;
    }
    float* sum = rows_.data() + it->second * dim;
    for (std::size_t j = 0; j < dim; ++j) sum[j] += row[j];
  }
}

void SparseRowAccumulator::skip() {
  start_step_if_finished();
  skipped_ = true;
}

SparseRowAccumulator::StepRows SparseRowAccumulator::finish(int micro_batches) {
  start_step_if_finished();
  finished_ = true;
  if (skipped_) return {};
  const float factor = 1.0f / static_cast<float>(micro_batches);
  for (float& v : rows_) v *= factor;
  return {ids_, rows_.data()};
}

}  // namespace aiacc::trainer
