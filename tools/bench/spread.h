// The median, min and max of a benchmark's repeated measurements: what the benches report for
// a figure measured several times on this noisy machine.
#pragma once

#include <algorithm>
#include <vector>

namespace aiacc::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
};

// `values` must not be empty; an even count's median is the mean of the middle two.
inline Spread spread_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

}  // namespace aiacc::bench
