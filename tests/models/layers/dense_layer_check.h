// Shared checks for the dense layer tests: finite-difference gradients through a Layer in
// float64, and the backward contract (grads overwritten, grad_ready() once per parameter).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "models/layers/layer.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::models::testing {

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64) {
  Tensor t = Tensor::from_vector(aiacc::testing::random_values(shape.numel(), seed), shape);
  return dtype == DType::f64 ? t : t.to(dtype);
}

// With loss = sum(upstream * layer.forward(input)) for a fixed random `upstream`, checks that
// backward's input gradient (when `check_input`) and every parameter gradient match central
// differences, that each grad_ready() fires exactly once per backward, and that a second
// forward/backward overwrites the gradients instead of adding to them. `input` is f64 and is
// perturbed in place (and restored). Keep inputs away from kinks (ReLU at 0, max-pool ties).
inline void expect_layer_gradients(Layer& layer, Tensor input, bool check_input = true) {
  // Shared, because the hooks stay registered on the parameters after this check returns.
  auto counts = std::make_shared<std::map<std::string, int>>();
  auto& ready_count = *counts;
  for (Parameter* p : layer.parameters()) {
    ASSERT_EQ(p->value().dtype(), DType::f64) << p->name();
    p->add_grad_ready_hook([counts](Parameter& param) { ++(*counts)[param.name()]; });
  }
  const Tensor upstream = random_tensor(layer.forward(input, true).shape(), 977);
  auto loss = [&] {
    const Tensor out = layer.forward(input, true);
    auto o = out.span<double>();
    auto u = upstream.span<double>();
    return std::inner_product(o.begin(), o.end(), u.begin(), 0.0);
  };

  loss();
  const Tensor grad_input = layer.backward(upstream, /*need_input_grad=*/true);
  std::map<std::string, std::vector<double>> param_grads;
  for (Parameter* p : layer.parameters()) {
    EXPECT_EQ(ready_count[p->name()], 1) << p->name();
    param_grads[p->name()] = p->grad().to_vector<double>();
  }
  if (check_input) {
    ASSERT_TRUE(grad_input.defined());
    ASSERT_EQ(grad_input.shape(), input.shape());
    EXPECT_TRUE(aiacc::testing::gradients_close(
        grad_input.span<double>(), aiacc::testing::numeric_gradient(loss, input.span<double>())))
        << layer.name() << ": input gradient";
  }
  for (Parameter* p : layer.parameters()) {
    EXPECT_TRUE(aiacc::testing::gradients_close(
        param_grads[p->name()], aiacc::testing::numeric_gradient(loss, p->value().span<double>())))
        << p->name();
  }

  // A second step must overwrite: same input, same upstream, same gradients (not doubled).
  loss();
  const Tensor none = layer.backward(upstream, /*need_input_grad=*/false);
  EXPECT_FALSE(none.defined()) << layer.name() << ": need_input_grad=false returned a tensor";
  for (Parameter* p : layer.parameters()) {
    EXPECT_EQ(ready_count[p->name()], 2) << p->name();
    EXPECT_TRUE(aiacc::testing::gradients_close(p->grad().to_vector<double>(),
                                                param_grads[p->name()], 1e-12, 1e-14))
        << p->name() << ": second backward changed the gradient (accumulated?)";
  }
}

}  // namespace aiacc::models::testing
