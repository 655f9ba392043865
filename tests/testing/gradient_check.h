// Finite-difference gradient checking in float64: the reference that layer, loss and model
// gradients are compared with (shared/STYLE.md practice 22).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <span>
#include <vector>

namespace aiacc::testing {

// Central differences (f(x+eps) - f(x-eps)) / 2eps of `loss` with respect to every element of
// `x`, which is perturbed in place and restored.
std::vector<double> numeric_gradient(const std::function<double()>& loss, std::span<double> x,
                                     double eps = 1e-6);

// Passes when |a - n| <= atol + rtol * max(|a|, |n|) for every element; the failure message
// names the worst element and both values.
::testing::AssertionResult gradients_close(std::span<const double> analytic,
                                           std::span<const double> numeric, double rtol = 1e-5,
                                           double atol = 1e-7);

// Deterministic random values in [low, high) for test inputs.
std::vector<double> random_values(std::size_t count, std::uint64_t seed, double low = -1.0,
                                  double high = 1.0);
std::vector<float> random_floats(std::size_t count, std::uint64_t seed, float low = -1.0f,
                                 float high = 1.0f);

}  // namespace aiacc::testing
