// cuDNN batch norm and pooling and our ReLU kernels against core/kernels' CPU versions:
// training forward with the running-statistic update, evaluation forward and backward for
// batch norm; max and average pooling forward and backward (odd sizes, padding, overlapping
// windows); ReLU in fp32 and bf16, NaN kept. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda/batch_norm.h"
#include "core/cuda/kernels/activation.h"
#include "core/cuda/kernels/batch_norm_nhwc.h"
#include "core/cuda/pooling.h"
#include "core/kernels/activation.h"
#include "core/kernels/batch_norm.h"
#include "core/kernels/pooling.h"
#include "core/util/half.h"
#include "tests/gpu/device_vector.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::cuda {
namespace {

using testing::DeviceVector;
using testing::expect_close;
using testing::random_floats;

TEST(GpuLayers, BatchNormMatchesTheCpu) {
  const std::int64_t n = 6, c = 5, h = 7, w = 3;
  const kernels::BatchNormGeometry g{n, c, h * w};
  kernels::BatchNormOptions math;
  math.momentum = 0.2;
  const auto size = static_cast<std::size_t>(n * c * h * w);
  std::vector<float> x = random_floats(size, 1, -2.0f, 3.0f);
  const std::vector<float> gamma = random_floats(static_cast<std::size_t>(c), 2, 0.5f, 1.5f);
  const std::vector<float> beta = random_floats(static_cast<std::size_t>(c), 3);
  const std::vector<float> dy = random_floats(size, 4);
  std::vector<float> y(size), mean(static_cast<std::size_t>(c)), inv_std(static_cast<std::size_t>(c));
  std::vector<float> running_mean(static_cast<std::size_t>(c), 0.1f), running_var(static_cast<std::size_t>(c), 0.9f);
  std::vector<float> dx(size), dgamma(static_cast<std::size_t>(c)), dbeta(static_cast<std::size_t>(c)), y_eval(size);
  const std::vector<float> running_mean_before = running_mean, running_var_before = running_var;
  kernels::batch_norm_forward_train<float>(g, math, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                                           inv_std.data(), running_mean.data(), running_var.data());
  kernels::batch_norm_backward<float>(g, kernels::BatchNormStats::batch, x.data(), dy.data(), gamma.data(),
                                      mean.data(), inv_std.data(), dx.data(), dgamma.data(), dbeta.data());
  kernels::batch_norm_forward_eval<float>(g, math, x.data(), gamma.data(), beta.data(), running_mean.data(),
                                          running_var.data(), y_eval.data());

  CudnnBatchNormOptions options;
  options.math = math;
  CudnnBatchNorm2d bn(n, c, h, w, options, 0);
  const CudnnHandle cudnn = CudnnHandle::create();
  const DeviceVector<float> d_x(x), d_gamma(gamma), d_beta(beta), d_dy(dy);
  DeviceVector<float> d_y(std::vector<float>(size, 9.0f)), d_dx(std::vector<float>(size, 9.0f));
  DeviceVector<float> d_y_eval(std::vector<float>(size, 9.0f));
  const std::vector<float> per_channel(static_cast<std::size_t>(c), 9.0f);
  DeviceVector<float> d_rm(running_mean_before), d_rv(running_var_before), d_mean(per_channel),
      d_inv_std(per_channel), d_dgamma(per_channel), d_dbeta(per_channel);
  bn.forward_train(cudnn, d_x.get(), d_gamma.get(), d_beta.get(), d_y.get(), d_rm.get(), d_rv.get(), d_mean.get(),
                   d_inv_std.get(), nullptr);
  bn.backward(cudnn, d_x.get(), d_dy.get(), d_gamma.get(), d_mean.get(), d_inv_std.get(), d_dx.get(),
              d_dgamma.get(), d_dbeta.get(), nullptr);
  bn.forward_eval(cudnn, d_x.get(), d_gamma.get(), d_beta.get(), d_rm.get(), d_rv.get(), d_y_eval.get(), nullptr);
  expect_close(d_y.to_host(), y, 1e-5f, "y");
  expect_close(d_mean.to_host(), mean, 1e-5f, "saved mean");
  expect_close(d_inv_std.to_host(), inv_std, 1e-5f, "saved inverse std");
  expect_close(d_rm.to_host(), running_mean, 1e-5f, "running mean");
  expect_close(d_rv.to_host(), running_var, 1e-5f, "running variance (unbiased)");
  expect_close(d_dx.to_host(), dx, 1e-4f, "dx");
  expect_close(d_dgamma.to_host(), dgamma, 1e-4f, "dgamma");
  expect_close(d_dbeta.to_host(), dbeta, 1e-4f, "dbeta");
  expect_close(d_y_eval.to_host(), y_eval, 1e-5f, "eval y");
}

// Our channels-last batch norm kernels (f32 storage here, so the bound is fp32's): 40 channels
// (a partial 32-wide tile), channel means far from zero (the one-pass variance's weak spot).
TEST(GpuLayers, ChannelsLastBatchNormKernelsMatchTheCpu) {
  const std::int64_t n = 6, c = 40, s = 21, rows = n * s;
  const kernels::BatchNormGeometry g{n, c, s};
  kernels::BatchNormOptions math;
  math.momentum = 0.2;
  const auto size = static_cast<std::size_t>(n * c * s);
  std::vector<float> x = random_floats(size, 11, -2.0f, 3.0f);
  for (std::size_t i = 0; i < size; ++i) x[i] += 50.0f * static_cast<float>((i / static_cast<std::size_t>(s)) % 7);
  const std::vector<float> gamma = random_floats(static_cast<std::size_t>(c), 12, 0.5f, 1.5f);
  const std::vector<float> beta = random_floats(static_cast<std::size_t>(c), 13);
  const std::vector<float> dy = random_floats(size, 14);
  const auto per_channel = static_cast<std::size_t>(c);
  std::vector<float> y(size), mean(per_channel), inv_std(per_channel), running_mean(per_channel, 0.1f),
      running_var(per_channel, 0.9f), dx(size), dgamma(per_channel), dbeta(per_channel), y_eval(size);
  kernels::batch_norm_forward_train<float>(g, math, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                                           inv_std.data(), running_mean.data(), running_var.data());
  kernels::batch_norm_backward<float>(g, kernels::BatchNormStats::batch, x.data(), dy.data(), gamma.data(),
                                      mean.data(), inv_std.data(), dx.data(), dgamma.data(), dbeta.data());
  kernels::batch_norm_forward_eval<float>(g, math, x.data(), gamma.data(), beta.data(), running_mean.data(),
                                          running_var.data(), y_eval.data());
  // [N, C, S] <-> [N, S, C]
  const auto to_nhwc = [&](const std::vector<float>& v) {
    std::vector<float> out(v.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t k = 0; k < s; ++k) out[static_cast<std::size_t>((i * s + k) * c + j)] = v[static_cast<std::size_t>((i * c + j) * s + k)];
    return out;
  };
  const DeviceVector<float> d_x(to_nhwc(x)), d_dy(to_nhwc(dy)), d_gamma(gamma), d_beta(beta);
  DeviceVector<float> d_y(std::vector<float>(size, 9.0f)), d_dx(std::vector<float>(size, 9.0f)),
      d_y_eval(std::vector<float>(size, 9.0f));
  const std::vector<float> nines(per_channel, 9.0f);
  DeviceVector<float> d_rm(std::vector<float>(per_channel, 0.1f)), d_rv(std::vector<float>(per_channel, 0.9f)),
      d_mean(nines), d_inv_std(nines), d_dgamma(nines), d_dbeta(nines);
  DeviceVector<unsigned char> scratch(std::vector<unsigned char>(batch_norm_nhwc_scratch_bytes(c), 0xff));
  launch_batch_norm_nhwc_forward_train(d_x.get(), d_gamma.get(), d_beta.get(), d_y.get(), d_rm.get(), d_rv.get(),
                                       d_mean.get(), d_inv_std.get(), rows, c, math, false, scratch.get(), nullptr);
  launch_batch_norm_nhwc_backward(d_x.get(), d_dy.get(), static_cast<const float*>(nullptr), d_gamma.get(),
                                  d_mean.get(), d_inv_std.get(), d_dx.get(), d_dgamma.get(), d_dbeta.get(), rows, c,
                                  scratch.get(), nullptr);
  launch_batch_norm_nhwc_forward_eval(d_x.get(), d_gamma.get(), d_beta.get(), d_rm.get(), d_rv.get(), d_y_eval.get(),
                                      rows, c, math, false, scratch.get(), nullptr);
  expect_close(d_y.to_host(), to_nhwc(y), 1e-4f, "y");
  expect_close(d_mean.to_host(), mean, 1e-6f, "saved mean");
  expect_close(d_inv_std.to_host(), inv_std, 1e-4f, "saved inverse std");
  expect_close(d_rm.to_host(), running_mean, 1e-6f, "running mean");
  expect_close(d_rv.to_host(), running_var, 1e-4f, "running variance (unbiased)");
  expect_close(d_dx.to_host(), to_nhwc(dx), 1e-3f, "dx");
  expect_close(d_dgamma.to_host(), dgamma, 1e-3f, "dgamma");
  expect_close(d_dbeta.to_host(), dbeta, 1e-4f, "dbeta");
  expect_close(d_y_eval.to_host(), to_nhwc(y_eval), 1e-4f, "eval y");

  // With the following ReLU fused in: y = max(BN(x), 0), and the backward lets dy through where
  // that y is positive, as the separate layers do.
  std::vector<float> y_relu(size), dy_masked(size), dx_relu(size), dgamma_relu(per_channel), dbeta_relu(per_channel);
  kernels::relu_forward<float>(static_cast<std::int64_t>(size), y.data(), y_relu.data());
  kernels::relu_backward<float>(static_cast<std::int64_t>(size), y_relu.data(), dy.data(), dy_masked.data());
  kernels::batch_norm_backward<float>(g, kernels::BatchNormStats::batch, x.data(), dy_masked.data(), gamma.data(),
                                      mean.data(), inv_std.data(), dx_relu.data(), dgamma_relu.data(),
                                      dbeta_relu.data());
  DeviceVector<float> d_y_relu(std::vector<float>(size, 9.0f)), d_dx_relu(std::vector<float>(size, 9.0f));
  DeviceVector<float> d_rm2(std::vector<float>(per_channel, 0.1f)), d_rv2(std::vector<float>(per_channel, 0.9f));
  launch_batch_norm_nhwc_forward_train(d_x.get(), d_gamma.get(), d_beta.get(), d_y_relu.get(), d_rm2.get(),
                                       d_rv2.get(), d_mean.get(), d_inv_std.get(), rows, c, math, true, scratch.get(),
                                       nullptr);
  launch_batch_norm_nhwc_backward(d_x.get(), d_dy.get(), static_cast<const float*>(d_y_relu.get()), d_gamma.get(),
                                  d_mean.get(), d_inv_std.get(), d_dx_relu.get(), d_dgamma.get(), d_dbeta.get(), rows,
                                  c, scratch.get(), nullptr);
  expect_close(d_y_relu.to_host(), to_nhwc(y_relu), 1e-4f, "y with ReLU");
  expect_close(d_dx_relu.to_host(), to_nhwc(dx_relu), 1e-3f, "dx through ReLU");
  expect_close(d_dgamma.to_host(), dgamma_relu, 1e-3f, "dgamma through ReLU");
  expect_close(d_dbeta.to_host(), dbeta_relu, 1e-4f, "dbeta through ReLU");
}

TEST(GpuLayers, PoolingMatchesTheCpu) {
  // Overlapping, padded 3x3/2 windows on an odd-sized plane.
  const kernels::Pool2dGeometry g{.batch = 3, .channels = 4, .height = 11, .width = 9, .kernel_h = 3,
                                  .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  const auto in = static_cast<std::size_t>(g.input_numel()), out = static_cast<std::size_t>(g.output_numel());
  const std::vector<float> x = random_floats(in, 5);
  const std::vector<float> dy = random_floats(out, 6);
  const CudnnHandle cudnn = CudnnHandle::create();
  for (PoolMode mode : {PoolMode::max, PoolMode::average}) {
    std::vector<float> y(out), dx(in);
    if (mode == PoolMode::max) {
      std::vector<std::int64_t> argmax(out);
      kernels::max_pool2d_forward<float>(g, x.data(), y.data(), argmax.data());
      kernels::max_pool2d_backward<float>(g, dy.data(), argmax.data(), dx.data());
    } else {
      kernels::avg_pool2d_forward<float>(g, x.data(), y.data());
      kernels::avg_pool2d_backward<float>(g, dy.data(), dx.data());
    }
    CudnnPool2d pool(g, mode, DType::f32, TensorLayout::nchw, 0);
    const DeviceVector<float> d_x(x), d_dy(dy);
    DeviceVector<float> d_y(std::vector<float>(out, 9.0f)), d_dx(std::vector<float>(in, 9.0f));
    pool.forward(cudnn, d_x.get(), d_y.get(), nullptr);
    pool.backward(cudnn, d_x.get(), d_y.get(), d_dy.get(), d_dx.get(), nullptr);
    const char* name = mode == PoolMode::max ? "max" : "average";
    expect_close(d_y.to_host(), y, 1e-6f, std::string(name) + " y");
    expect_close(d_dx.to_host(), dx, 1e-6f, std::string(name) + " dx");
  }
}

TEST(GpuLayers, ReluMatchesTheCpuInFp32AndBf16) {
  std::vector<float> x = random_floats(100001, 7);
  x[5] = 0.0f;
  x[6] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> dy = random_floats(x.size(), 8);
  std::vector<float> y(x.size()), dx(x.size());
  kernels::relu_forward<float>(static_cast<std::int64_t>(x.size()), x.data(), y.data());
  kernels::relu_backward<float>(static_cast<std::int64_t>(x.size()), y.data(), dy.data(), dx.data());
  const DeviceVector<float> d_x(x), d_dy(dy);
  DeviceVector<float> d_y(std::vector<float>(x.size())), d_dx(std::vector<float>(x.size()));
  launch_relu_forward<float>(d_x.get(), d_y.get(), static_cast<std::int64_t>(x.size()), nullptr);
  launch_relu_backward<float>(d_y.get(), d_dy.get(), d_dx.get(), static_cast<std::int64_t>(x.size()), nullptr);
  const auto got_y = d_y.to_host();
  EXPECT_TRUE(std::isnan(got_y[6]));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i != 6) {
      ASSERT_EQ(got_y[i], y[i]) << i;
    }
  }
  EXPECT_EQ(d_dx.to_host(), dx);

  std::vector<BFloat16> xb(x.size()), dyb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    xb[i] = to_bf16(x[i]);
    dyb[i] = to_bf16(dy[i]);
  }
  const DeviceVector<BFloat16> d_xb(xb), d_dyb(dyb);
  DeviceVector<BFloat16> d_yb(xb), d_dxb(xb);
  launch_relu_forward<BFloat16>(d_xb.get(), d_yb.get(), static_cast<std::int64_t>(x.size()), nullptr);
  launch_relu_backward<BFloat16>(d_yb.get(), d_dyb.get(), d_dxb.get(), static_cast<std::int64_t>(x.size()), nullptr);
  const auto yb = d_yb.to_host(), dxb = d_dxb.to_host();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i == 6) continue;
    const float in = to_float(xb[i]);
    ASSERT_EQ(to_float(yb[i]), in < 0 ? 0.0f : in) << i;
    ASSERT_EQ(to_float(dxb[i]), in > 0 ? to_float(dyb[i]) : 0.0f) << i;
  }
}

}  // namespace
}  // namespace aiacc::cuda
