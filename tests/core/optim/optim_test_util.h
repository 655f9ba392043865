// Test helpers for core/optim: random weight/gradient vectors (with exact zeros and negative
// values) and a float-vs-float64-reference comparison with a relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/random.h"

namespace aiacc::optim::testing {

// `count` values uniform in [-scale, scale], about one in five exactly 0.
inline std::vector<float> random_vector(std::size_t count, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> out(count);
  for (auto& v : out)
    v = rng.uniform() < 0.2 ? 0.0f : static_cast<float>(rng.uniform(-scale, scale));
  return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Every element within rel*(|ref| + floor) of the reference.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& reference,
                         double rel, const std::string& what, double floor = 1e-3) {
  ASSERT_EQ(actual.size(), reference.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], reference[i], rel * (std::fabs(reference[i]) + floor))
        << what << " element " << i;
  }
}

}  // namespace aiacc::optim::testing
