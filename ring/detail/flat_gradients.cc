#include "ring/detail/flat_gradients.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring::detail {

std::vector<std::pair<std::string, std::int64_t>> gradient_listing(const std::vector<Parameter*>& parameters) {
  // No buckets would leave nothing for a step to wait on (and the host fuser's last-bucket run
  // would index bucket -1).
  if (parameters.empty()) throw ConfigError("gradient fusion: no dense parameters");
  std::vector<std::pair<std::string, std::int64_t>> out;
  out.reserve(parameters.size());
  for (const Parameter* p : parameters) {
    if (p->kind() != ParamKind::dense || p->grad().dtype() != DType::f32) {
      throw ConfigError(fmt::format("gradient fusion: parameter '{}' is not a dense f32 tensor", p->name()));
    }
    out.emplace_back(p->name(), p->grad().numel());
  }
  return out;
}

Tensor bind_flat_gradients(const std::vector<Parameter*>& parameters, const BucketPlan& layout, Device device) {
  Tensor flat = Tensor::zeros(Shape{layout.total_count()}, DType::f32, device);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const PlannedTensor& slot = layout.tensors()[i];
    Tensor& grad = parameters[i]->grad();
    grad.rebind(flat.rows(slot.offset, slot.offset + slot.count).reshape(grad.shape()));
  }
  return flat;
}

}  // namespace aiacc::ring::detail
