// Optimizer: state allocation, the per-type dispatch over chunks, and state (de)serialisation.
#include "core/optim/optimizer.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/optim/detail/chunked.h"

namespace aiacc::optim {

using detail::RuleType;
using detail::slice;

Optimizer::Optimizer(const OptimizerOptions& options, std::vector<Parameter*> params)
    : options_(options), type_(detail::parse_rule_type(options.type)) {
  std::set<std::string> names;
  std::int64_t max_chunks = 0;
  const std::vector<const char*> planes = plane_names();
  for (Parameter* param : params) {
    AIACC_CHECK(param != nullptr, "null parameter given to the optimizer");
    AIACC_CHECK(param->kind() == ParamKind::dense,
                "parameter '{}' is sparse: its rows are updated by the parameter servers' "
                "SparseRowOptimizer, not the dense Optimizer",
                param->name());
    AIACC_CHECK(names.insert(param->name()).second, "duplicate parameter name '{}'", param->name());
    const Tensor& value = param->value();
    const Tensor& grad = param->grad();
    AIACC_CHECK(value.dtype() == DType::f32,
                "parameter '{}': the optimizer updates f32 tensors, got {} on {}",
                param->name(), dtype_name(value.dtype()), value.device().str());
    AIACC_CHECK(grad.defined() && grad.dtype() == DType::f32 && grad.shape() == value.shape() &&
                    grad.device() == value.device(),
                "parameter '{}': grad must be f32 of shape {} on {}", param->name(),
                value.shape().str(), value.device().str());
    const bool on_device = !value.device().is_cpu();
    AIACC_CHECK(!on_device || type_ == RuleType::sgd || type_ == RuleType::adam || type_ == RuleType::adamw,
                "parameter '{}' is on {}: the optimizer '{}' runs on the CPU only (sgd, adam and "
                "adamw run on devices)", param->name(), value.device().str(), options_.type);
    Slot slot{param, {}};
    for (std::size_t p = 0; p < planes.size(); ++p) {
      const double initial = type_ == RuleType::adagrad ? options_.initial_accumulator : 0.0;
      // Device planes start at zero: only sgd and adam run there, and both start from zero.
      slot.planes.push_back(on_device ? Tensor::zeros(value.shape(), DType::f32, value.device())
                                      : Tensor::full(value.shape(), initial, DType::f32));
    }
    max_chunks = std::max(max_chunks, detail::num_chunks(value.numel()));
    slots_.push_back(std::move(slot));
  }
  partial_norms_.resize(static_cast<std::size_t>(max_chunks));
}

std::vector<const char*> Optimizer::plane_names() const {
  switch (type_) {
    case RuleType::sgd:
    case RuleType::lars:
      return options_.momentum > 0.0 ? std::vector<const char*>{"momentum"}
                                     : std::vector<const char*>{};
    case RuleType::adam:
    case RuleType::adamw:
    case RuleType::lamb:
      return {"exp_avg", "exp_avg_sq"};
    case RuleType::adagrad:
      return {"sum"};
    case RuleType::ftrl:
      return {"z", "n"};
  }
  return {};
}

void Optimizer::step(double lr) {
  // The trainer may rebind gradients into flat buffers. Check every parameter before touching
  // any (a failed step changes nothing), and because the chunks below must not throw.
  for (const Slot& slot : slots_) {
    AIACC_CHECK(slot.param->grad().defined() && slot.param->grad().dtype() == DType::f32 &&
                    slot.param->grad().shape() == slot.param->value().shape(),
                "parameter '{}': grad is no longer f32 of shape {}", slot.param->name(),
                slot.param->value().shape().str());
  }
  ++step_;
  for (Slot& slot : slots_) {
    if (type_ == RuleType::lars) {
      step_lars(slot, lr);
    } else if (type_ == RuleType::lamb) {
      step_lamb(slot, lr);
    } else {
      step_parameter(slot, lr);
    }
  }
}

void Optimizer::step_on_device(Slot& slot, double lr) {
  const Tensor& value = slot.param->value();
  const Device device = value.device();
  DeviceOps& ops = device_ops(device);
  float* w = value.data<float>();
  const float* g = slot.param->grad().data<float>();
  float* plane0 = slot.planes.empty() ? nullptr : slot.planes[0].data<float>();
  const double wd = slot.param->decays() ? options_.weight_decay : 0.0;
  if (type_ == RuleType::sgd) {
    SgdRule rule = detail::sgd_rule(options_);
    rule.weight_decay = wd;
    ops.sgd_update(device, rule, w, g, plane0, value.numel(), step_, lr);
  } else {
    AdamRule rule = detail::adam_rule(options_, type_ == RuleType::adamw);
    rule.weight_decay = wd;
    ops.adam_update(device, rule, w, g, plane0, slot.planes[1].data<float>(), value.numel(), step_, lr);
  }
}

void Optimizer::step_parameter(Slot& slot, double lr) {
  if (!slot.param->value().device().is_cpu()) {
    step_on_device(slot, lr);
    return;
  }
  const std::span<float> w = slot.param->value().span<float>();
  const std::span<const float> g = slot.param->grad().span<float>();
  const std::span<float> plane0 =
      slot.planes.empty() ? std::span<float>() : slot.planes[0].span<float>();
  const std::span<float> plane1 =
      slot.planes.size() < 2 ? std::span<float>() : slot.planes[1].span<float>();
  const double wd = slot.param->decays() ? options_.weight_decay : 0.0;
  const std::int64_t t = step_;
  const auto n = static_cast<std::int64_t>(w.size());
  switch (type_) {
    case RuleType::sgd: {
      SgdRule rule = detail::sgd_rule(options_);
      rule.weight_decay = wd;
      detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        rule.update(slice(w, b, e), slice(g, b, e), slice(plane0, b, e), t, lr);
      });
      break;
    }
    case RuleType::adam:
    case RuleType::adamw: {
      AdamRule rule = detail::adam_rule(options_, type_ == RuleType::adamw);
      rule.weight_decay = wd;
      detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        rule.update(slice(w, b, e), slice(g, b, e), slice(plane0, b, e), slice(plane1, b, e), t,
                    lr);
      });
      break;
    }
    case RuleType::adagrad: {
      AdagradRule rule = detail::adagrad_rule(options_);
      rule.weight_decay = wd;
      detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        rule.update(slice(w, b, e), slice(g, b, e), slice(plane0, b, e), lr);
      });
      break;
    }
    case RuleType::ftrl: {
      const FtrlRule rule = detail::ftrl_rule(options_);  // regularised by l1/l2 only
      detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        rule.update(slice(w, b, e), slice(g, b, e), slice(plane0, b, e), slice(plane1, b, e), lr);
      });
      break;
    }
    case RuleType::lars:
    case RuleType::lamb:
      AIACC_CHECK(false, "layer-wise rules are stepped by step_lars/step_lamb");
  }
}

void Optimizer::step_lars(Slot& slot, double lr) {
  const std::span<float> w = slot.param->value().span<float>();
  const std::span<const float> g = slot.param->grad().span<float>();
  const std::span<float> velocity =
      slot.planes.empty() ? std::span<float>() : slot.planes[0].span<float>();
  const auto n = static_cast<std::int64_t>(w.size());
  LarsRule rule = detail::lars_rule(options_);
  double trust = 1.0;
  if (slot.param->decays()) {
    // Norms per fixed chunk, summed in chunk order: the same bits for any thread count.
    detail::for_each_chunk(n, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      partial_norms_[static_cast<std::size_t>(c)] =
          rule.norms(slice(std::span<const float>(w), b, e), slice(g, b, e));
    });
    SquaredNorms total;
    for (std::int64_t c = 0; c < detail::num_chunks(n); ++c)
      total += partial_norms_[static_cast<std::size_t>(c)];
    trust = rule.trust_ratio(std::sqrt(total.weights), std::sqrt(total.other));
  } else {
    rule.weight_decay = 0.0;  // excluded from decay and from adaptation: plain momentum SGD
  }
  detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    rule.update(slice(w, b, e), slice(g, b, e), slice(velocity, b, e), lr, trust);
  });
}

void Optimizer::step_lamb(Slot& slot, double lr) {
  const std::span<float> w = slot.param->value().span<float>();
  const std::span<const float> g = slot.param->grad().span<float>();
  const std::span<float> exp_avg = slot.planes[0].span<float>();
  const std::span<float> exp_avg_sq = slot.planes[1].span<float>();
  const auto n = static_cast<std::int64_t>(w.size());
  const std::int64_t t = step_;
  LambRule rule = detail::lamb_rule(options_);
  if (!slot.param->decays()) rule.weight_decay = 0.0;
  detail::for_each_chunk(n, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    partial_norms_[static_cast<std::size_t>(c)] =
        rule.advance_moments(slice(std::span<const float>(w), b, e), slice(g, b, e),
                             slice(exp_avg, b, e), slice(exp_avg_sq, b, e), t);
  });
  double trust = 1.0;
  if (slot.param->decays()) {
    SquaredNorms total;
    for (std::int64_t c = 0; c < detail::num_chunks(n); ++c)
      total += partial_norms_[static_cast<std::size_t>(c)];
    trust = rule.trust_ratio(std::sqrt(total.weights), std::sqrt(total.other));
  }
  detail::for_each_chunk(n, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    rule.apply(slice(w, b, e), slice(std::span<const float>(exp_avg), b, e),
               slice(std::span<const float>(exp_avg_sq), b, e), t, lr, trust);
  });
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  const std::vector<const char*> planes = plane_names();
  for (const Slot& slot : slots_) {
    for (std::size_t p = 0; p < planes.size(); ++p) {
      out.emplace_back(fmt::format("{}.{}", slot.param->name(), planes[p]), slot.planes[p]);
    }
  }
  out.emplace_back("step", Tensor::from_vector<std::int64_t>({step_}, Shape()));
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) {
    if (!given.emplace(name, &tensor).second)
      throw DataError(fmt::format("optimizer state '{}' appears twice", name));
  }
  // Validate everything before copying anything, so a bad checkpoint leaves the state intact.
  auto take = [&](const std::string& name) -> const Tensor& {
    auto it = given.find(name);
    if (it == given.end()) {
      throw DataError(
          fmt::format("optimizer state '{}' is missing (optimizer type {})", name, options_.type));
    }
    const Tensor& tensor = *it->second;
    given.erase(it);
    return tensor;
  };
  const std::vector<const char*> planes = plane_names();
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination handle, source)
  for (const Slot& slot : slots_) {
    for (std::size_t p = 0; p < planes.size(); ++p) {
      const std::string name = fmt::format("{}.{}", slot.param->name(), planes[p]);
      const Tensor& source = take(name);
      if (!source.defined() || source.dtype() != DType::f32 ||
          source.shape() != slot.planes[p].shape()) {
        throw DataError(fmt::format(
            "optimizer state '{}': expected f32 {}, got {} {}", name, slot.planes[p].shape().str(),
            source.defined() ? dtype_name(source.dtype()) : "undefined", source.shape().str()));
      }
      copies.emplace_back(slot.planes[p], source);
    }
  }
  const Tensor& step_tensor = take("step");
  if (!step_tensor.defined() || step_tensor.numel() != 1) {
    throw DataError("optimizer state 'step': expected a scalar");
  }
  const std::int64_t loaded_step = step_tensor.to(DType::i64).data<std::int64_t>()[0];
  if (loaded_step < 0)
    throw DataError(fmt::format("optimizer state 'step': negative value {}", loaded_step));
  if (!given.empty()) {
    throw DataError(fmt::format("optimizer state '{}' does not belong to this optimizer (type {})",
                                given.begin()->first, options_.type));
  }
  for (auto& [destination, source] : copies) destination.copy_from(source);
  step_ = loaded_step;
}

}  // namespace aiacc::optim
