// The cuBLAS linear layer against core/kernels' CPU linear layer: forward and all three
// gradients, in fp32 and with bf16 inputs (compared with the CPU on the same bf16-rounded
// values), for odd sizes, with and without bias. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/linear.h"
#include "core/kernels/linear.h"
#include "core/util/half.h"
#include "tests/gpu/device_vector.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::cuda {
namespace {

using testing::DeviceVector;
using testing::expect_close;
using testing::random_floats;

// Runs the GPU layer with inputs stored as T and the CPU layer on the same (rounded) values.
template <class T>
void compare_with_cpu(const kernels::LinearGeometry& g, bool with_bias, float tolerance) {
  const auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  std::vector<float> x = random_floats(n(g.batch * g.in_features), 1);
  std::vector<float> w = random_floats(n(g.out_features * g.in_features), 2);
  std::vector<float> dy = random_floats(n(g.batch * g.out_features), 3);
  const std::vector<float> b = random_floats(n(g.out_features), 4);
  std::vector<T> xs(x.size()), ws(w.size()), dys(dy.size());
  const auto store = [](const std::vector<float>& from, std::vector<float>& rounded, std::vector<T>& to) {
    for (std::size_t i = 0; i < from.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        to[i] = to_bf16(from[i]);
        rounded[i] = to_float(to[i]);
      } else {
        to[i] = from[i];
      }
    }
  };
  store(x, x, xs);
  store(w, w, ws);
  store(dy, dy, dys);
  std::vector<float> y(n(g.batch * g.out_features)), dx(x.size()), dw(w.size()), db(b.size());
  kernels::linear_forward<float>(g, x.data(), w.data(), with_bias ? b.data() : nullptr, y.data());
  kernels::linear_backward<float>(g, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());

  const CublasHandle cublas = CublasHandle::create();
  const DeviceVector<T> d_x(xs), d_w(ws), d_dy(dys);
  const DeviceVector<float> d_b(b);
  DeviceVector<float> d_y(std::vector<float>(y.size(), 9.0f)), d_dx(std::vector<float>(dx.size(), 9.0f));
  DeviceVector<float> d_dw(std::vector<float>(dw.size(), 9.0f)), d_db(std::vector<float>(db.size(), 9.0f));
  linear_forward<T>(cublas, g, d_x.get(), d_w.get(), with_bias ? d_b.get() : nullptr, d_y.get(), nullptr);
  linear_backward<T>(cublas, g, d_x.get(), d_w.get(), d_dy.get(), d_dx.get(), d_dw.get(), d_db.get(), nullptr);
  expect_close(d_y.to_host(), y, tolerance, "y");
  expect_close(d_dx.to_host(), dx, tolerance, "dx");
  expect_close(d_dw.to_host(), dw, tolerance, "dw");
  expect_close(d_db.to_host(), db, tolerance, "db");
}

TEST(GpuLinear, Fp32MatchesTheCpuLayer) {
  compare_with_cpu<float>({37, 129, 65}, true, 1e-4f);
  compare_with_cpu<float>({1, 3, 1}, false, 1e-5f);
  compare_with_cpu<float>({512, 1024, 256}, true, 1e-4f);
}

TEST(GpuLinear, EmptyDimensionsGiveZerosLikeTheCpu) {
  compare_with_cpu<float>({4, 0, 3}, true, 1e-6f);   // no inputs: y = b, dw empty
  compare_with_cpu<float>({4, 5, 0}, true, 1e-6f);   // no outputs: dx = 0
  compare_with_cpu<float>({0, 5, 3}, true, 1e-6f);   // no examples: dw = 0, db = 0
}

TEST(GpuLinear, Bf16InputsMatchTheCpuOnTheSameValues) {
  // Products of bf16 values are exact in fp32; only the summation order differs.
  compare_with_cpu<BFloat16>({64, 256, 128}, true, 1e-3f);
  compare_with_cpu<BFloat16>({33, 17, 5}, false, 1e-3f);
}

}  // namespace
}  // namespace aiacc::cuda
