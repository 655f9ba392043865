#include "tests/testing/gradient_check.h"

#include <cmath>

#include "core/util/random.h"

namespace aiacc::testing {

std::vector<double> numeric_gradient(const std::function<double()>& loss, std::span<double> x,
                                     double eps) {
  std::vector<double> gradient(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    gradient[i] = (plus - minus) / (2 * eps);
  }
  return gradient;
}

::testing::AssertionResult gradients_close(std::span<const double> analytic,
                                           std::span<const double> numeric, double rtol,
                                           double atol) {
  if (analytic.size() != numeric.size()) {
    return ::testing::AssertionFailure() << "size mismatch: analytic " << analytic.size()
                                         << " vs numeric " << numeric.size();
  }
  double worst_excess = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i], n = numeric[i];
    const double allowed = atol + rtol * std::max(std::abs(a), std::abs(n));
    const double excess = std::isfinite(a) && std::isfinite(n) ? std::abs(a - n) - allowed : HUGE_VAL;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess > 0) {
    return ::testing::AssertionFailure()
           << "gradient element " << worst << " of " << analytic.size() << ": analytic "
           << analytic[worst] << " vs numeric " << numeric[worst] << " (rtol " << rtol
           << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> random_values(std::size_t count, std::uint64_t seed, double low, double high) {
  Rng rng(seed);
  std::vector<double> values(count);
  for (auto& v : values) v = rng.uniform(low, high);
  return values;
}

std::vector<float> random_floats(std::size_t count, std::uint64_t seed, float low, float high) {
  Rng rng(seed);
  std::vector<float> values(count);
  for (auto& v : values) v = static_cast<float>(rng.uniform(low, high));
  return values;
}

}  // namespace aiacc::testing
