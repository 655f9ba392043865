// DynamicLossScaler and unscale_gradients.
#include "core/optim/loss_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace aiacc::optim {

void LossScalerOptions::validate() const {
  const auto fail = [](const char* field, double value, const char* rule) {
    throw ConfigError(fmt::format("loss scaler: {} = {} ({})", field, value, rule));
  };
  if (!(min_scale > 0)) fail("min_scale", min_scale, "must be positive");
  if (!(max_scale >= min_scale)) fail("max_scale", max_scale, "must be at least min_scale");
  if (!(initial_scale >= min_scale && initial_scale <= max_scale)) {
    fail("initial_scale", initial_scale, "must lie in [min_scale, max_scale]");
  }
  if (!(growth_factor > 1)) fail("growth_factor", growth_factor, "must be above 1");
  if (!(backoff_factor > 0 && backoff_factor < 1)) fail("backoff_factor", backoff_factor, "must lie in (0, 1)");
  if (growth_interval < 1) fail("growth_interval", static_cast<double>(growth_interval), "must be at least 1");
}

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale) {
  options_.validate();
}

bool DynamicLossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    clean_in_a_row_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_in_a_row_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    clean_in_a_row_ = 0;
  }
  return true;
}

void DynamicLossScaler::restore(double scale, std::int64_t clean_in_a_row) {
  if (!(scale >= options_.min_scale && scale <= options_.max_scale) || clean_in_a_row < 0 ||
      clean_in_a_row >= options_.growth_interval) {
    throw DataError(fmt::format("loss scaler: checkpointed scale {} with {} clean steps is outside "
                                "[{}, {}] / [0, {})", scale, clean_in_a_row, options_.min_scale,
                                options_.max_scale, options_.growth_interval));
  }
  scale_ = scale;
  clean_in_a_row_ = clean_in_a_row;
}

bool unscale_gradients(std::span<float> grads, float inv_scale) {
  bool found = false;
  for (float& g : grads) {
    found |= !std::isfinite(g);
    g *= inv_scale;
  }
  return found;
}

}  // namespace aiacc::optim
