#include "tools/trainer/grad_accumulation.h"

#include <fmt/format.h>

#include "core/device_ops.h"
#include "core/error.h"

namespace aiacc::trainer {
namespace {

// sum += grad, where the two live.
void add_into(Tensor& sum, const Tensor& grad) {
  const std::int64_t n = grad.numel();
  if (grad.device().is_cpu()) {
    float* s = sum.data<float>();
    const float* g = grad.data<float>();
    for (std::int64_t i = 0; i < n; ++i) s[i] += g[i];
    return;
  }
  device_ops(grad.device()).add(grad.device(), DType::f32, n, sum.data<float>(), grad.data<float>(), sum.data<float>());
}

void scale_in_place(Tensor& grad, float factor) {
  const std::int64_t n = grad.numel();
  if (grad.device().is_cpu()) {
    float* g = grad.data<float>();
    for (std::int64_t i = 0; i < n; ++i) g[i] *= factor;
    return;
  }
  // Its non-finite check is the loss scaler's business, later, over the reduced gradients.
  const std::pair<float*, std::int64_t> values{grad.data<float>(), n};
  (void)device_ops(grad.device()).multiply_and_check(grad.device(), {&values, 1}, factor);
}

// grad = (sum + grad) * factor, or grad = sum * factor without this micro-batch's gradient.
void mean_into(Tensor& grad, const Tensor& sum, bool with_grad, float factor) {
  const std::int64_t n = grad.numel();
  if (grad.device().is_cpu()) {
    float* g = grad.data<float>();
    const float* s = sum.data<float>();
    for (std::int64_t i = 0; i < n; ++i) g[i] = ((with_grad ? g[i] : 0.0f) + s[i]) * factor;
    return;
  }
  DeviceOps& ops = device_ops(grad.device());
  if (with_grad) {
    ops.add(grad.device(), DType::f32, n, sum.data<float>(), grad.data<float>(), grad.data<float>());
  } else {
    grad.copy_from(sum);
  }
  scale_in_place(grad, factor);
}

}  // namespace

DenseGradAccumulator::DenseGradAccumulator(const std::vector<Parameter*>& params, int micro_batches)
    : micro_batches_(micro_batches), inverse_(1.0f / static_cast<float>(micro_batches)) {
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
  if (micro_batches_ == 1) return;
  Tensor& grad = slot.param->grad();
  slot.fired = true;
  if (index_ + 1 == micro_batches_) {
    // The mean over the step's K micro-batches (those that gave no gradient count as zero).
    if (slot.summed) {
      mean_into(grad, slot.sum, /*with_grad=*/true, inverse_);
    } else {
      scale_in_place(grad, inverse_);
    }
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
  for (auto& slot : slots_) {
    if (!slot->fired && slot->summed) mean_into(slot->param->grad(), slot->sum, /*with_grad=*/false, inverse_);
  }
}

void SparseRowAccumulator::add(std::span<const std::int64_t> ids, const float* rows) {
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

void SparseRowAccumulator::scale(float factor) {
  for (float& v : rows_) v *= factor;
}

void SparseRowAccumulator::clear() {
  ids_.clear();
  rows_.clear();
  row_of_.clear();
}

}  // namespace aiacc::trainer
