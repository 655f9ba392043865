// The cuDNN convolution against core/kernels' CPU convolution: forward, backward-data and
// backward-weight for ResNet's shapes (3x3 same, strided 3x3, 1x1, the 7x7/2 stem), in NCHW
// and NHWC, fp32 (TF32 off) and bf16 (compared with the CPU on the same bf16-rounded values);
// the algorithm choice is made once per shape. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda/conv2d.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"
#include "core/kernels/conv2d.h"
#include "core/util/half.h"
#include "tests/testing/gradient_check.h"

namespace aiacc::cuda {
namespace {

using kernels::Conv2dGeometry;

using testing::random_floats;

// [A, B, C, D] (NCHW, or OIHW for weights) <-> [A, C, D, B] (NHWC, OHWI).
std::vector<float> to_channels_last(const std::vector<float>& v, std::int64_t a, std::int64_t b,
                                    std::int64_t c, std::int64_t d) {
  std::vector<float> out(v.size());
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j)
      for (std::int64_t k = 0; k < c; ++k)
        for (std::int64_t l = 0; l < d; ++l) out[((i * c + k) * d + l) * b + j] = v[((i * b + j) * c + k) * d + l];
  return out;
}

// Device storage of `values` in `dtype` (f32 or bf16), and back as floats.
class DeviceFloats {
 public:
  DeviceFloats(const std::vector<float>& values, DType dtype)
      : n_(values.size()), dtype_(dtype),
        buffer_(device_allocator(0), std::max<std::size_t>(n_, 1) * dtype_size(dtype), 0) {
    if (dtype == DType::bf16) {
      std::vector<BFloat16> b(n_);
      for (std::size_t i = 0; i < n_; ++i) b[i] = to_bf16(values[i]);
      AIACC_CUDA_CHECK(cudaMemcpy(buffer_.get(), b.data(), n_ * 2, cudaMemcpyHostToDevice));
    } else {
      AIACC_CUDA_CHECK(cudaMemcpy(buffer_.get(), values.data(), n_ * 4, cudaMemcpyHostToDevice));
    }
  }
  void* get() const { return buffer_.get(); }
  std::vector<float> to_host() const {
    AIACC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out(n_);
    if (dtype_ == DType::bf16) {
      std::vector<BFloat16> b(n_);
      AIACC_CUDA_CHECK(cudaMemcpy(b.data(), buffer_.get(), n_ * 2, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n_; ++i) out[i] = to_float(b[i]);
    } else {
      AIACC_CUDA_CHECK(cudaMemcpy(out.data(), buffer_.get(), n_ * 4, cudaMemcpyDeviceToHost));
    }
    return out;
  }

 private:
  std::size_t n_;
  DType dtype_;
  memory::PooledBuffer buffer_;
};

std::vector<float> rounded(std::vector<float> v, DType dtype) {
  if (dtype == DType::bf16) {
    for (float& x : v) x = to_float(to_bf16(x));
  }
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 1.0f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * scale) << what << " element " << i;
  }
}

void compare_with_cpu(const Conv2dGeometry& g, DType dtype, TensorLayout layout, float tolerance) {
  const auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const std::vector<float> x = rounded(random_floats(n(g.input_numel()), 1), dtype);
  const std::vector<float> w = rounded(random_floats(n(g.weight_numel()), 2), dtype);
  const std::vector<float> dy = rounded(random_floats(n(g.output_numel()), 3), dtype);
  std::vector<float> y(n(g.output_numel())), dx(x.size()), dw(w.size());
  kernels::conv2d_forward<float>(g, x.data(), w.data(), nullptr, y.data());
  kernels::conv2d_backward_data<float>(g, w.data(), dy.data(), dx.data());
  kernels::conv2d_backward_weight<float>(g, x.data(), dy.data(), dw.data());

  const bool nhwc = layout == TensorLayout::nhwc;
  const auto arrange = [&](const std::vector<float>& v, std::int64_t a, std::int64_t b, std::int64_t c,
                           std::int64_t d) { return nhwc ? to_channels_last(v, a, b, c, d) : v; };
  const std::int64_t oh = g.out_height(), ow = g.out_width();
  CudnnConvOptions options;
  options.dtype = dtype;
  options.layout = layout;
  options.allow_tf32 = false;
  CudnnConv2d conv(g, options, 0);
  const CudnnHandle cudnn = CudnnHandle::create();
  const DeviceFloats d_x(arrange(x, g.batch, g.in_channels, g.height, g.width), dtype);
  const DeviceFloats d_w(arrange(w, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w), dtype);
  const DeviceFloats d_dy(arrange(dy, g.batch, g.out_channels, oh, ow), dtype);
  DeviceFloats d_y(std::vector<float>(y.size(), 9.0f), dtype);
  DeviceFloats d_dx(std::vector<float>(dx.size(), 9.0f), dtype);
  DeviceFloats d_dw(std::vector<float>(dw.size(), 9.0f), dtype);
  for (int run = 0; run < 2; ++run) {  // the second run uses the cached algorithms
    conv.forward(cudnn, d_x.get(), d_w.get(), d_y.get(), nullptr);
    conv.backward_data(cudnn, d_w.get(), d_dy.get(), d_dx.get(), nullptr);
    conv.backward_weight(cudnn, d_x.get(), d_dy.get(), d_dw.get(), nullptr);
  }
  const std::string what = conv.describe();
  expect_close(d_y.to_host(), arrange(y, g.batch, g.out_channels, oh, ow), tolerance, what + " y");
  expect_close(d_dx.to_host(), arrange(dx, g.batch, g.in_channels, g.height, g.width), tolerance, what + " dx");
  expect_close(d_dw.to_host(), arrange(dw, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w), tolerance,
               what + " dw");
  EXPECT_EQ(what.find("not chosen"), std::string::npos) << what;
}

std::vector<Conv2dGeometry> resnet_shapes() {
  // A basic block's 3x3, a downsampling 3x3, a bottleneck's 1x1, the 7x7/2 stem (odd image).
  const Conv2dGeometry same3{.batch = 4, .in_channels = 16, .height = 14, .width = 14, .out_channels = 32,
                             .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1};
  Conv2dGeometry strided = same3;
  strided.stride_h = strided.stride_w = 2;
  const Conv2dGeometry pointwise{.batch = 4, .in_channels = 16, .height = 14, .width = 14, .out_channels = 32};
  const Conv2dGeometry stem{.batch = 2, .in_channels = 3, .height = 33, .width = 31, .out_channels = 8,
                            .kernel_h = 7, .kernel_w = 7, .stride_h = 2, .stride_w = 2, .pad_h = 3, .pad_w = 3};
  return {same3, strided, pointwise, stem};
}

TEST(GpuConv2d, Fp32MatchesTheCpuInBothLayouts) {
  for (const Conv2dGeometry& g : resnet_shapes()) {
    compare_with_cpu(g, DType::f32, TensorLayout::nchw, 1e-4f);
    compare_with_cpu(g, DType::f32, TensorLayout::nhwc, 1e-4f);
  }
}

TEST(GpuConv2d, Bf16ChannelsLastMatchesTheCpuOnTheSameValues) {
  // Outputs are stored in bf16 (8 significant bits): a relative error of 2^-8 of the largest.
  for (const Conv2dGeometry& g : resnet_shapes()) compare_with_cpu(g, DType::bf16, TensorLayout::nhwc, 1e-2f);
}

TEST(GpuConv2d, UnsupportedDtypeIsAConfigError) {
  CudnnConvOptions options;
  options.dtype = DType::i64;
  EXPECT_THROW(CudnnConv2d(resnet_shapes()[0], options, 0), ConfigError);
}

}  // namespace
}  // namespace aiacc::cuda
