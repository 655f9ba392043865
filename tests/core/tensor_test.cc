// Tensors: shapes, views sharing storage, dtype conversion (fp16/bf16 rounding), rebind, and
// device tensors through a registered backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/tensor.h"
#include "tests/testing/fake_device.h"

namespace aiacc {
namespace {

TEST(Tensor, ShapeAndViewsShareStorage) {
  Tensor t = Tensor::zeros({4, 3});
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.shape().str(), "[4, 3]");
  Tensor middle = t.rows(1, 3);
  EXPECT_EQ(middle.shape(), (Shape{2, 3}));
  middle.fill(2.0);
  auto all = t.to_vector<float>();
  EXPECT_EQ(all[2], 0.0f);
  EXPECT_EQ(all[3], 2.0f);
  EXPECT_EQ(all[8], 2.0f);
  EXPECT_EQ(all[9], 0.0f);
  Tensor flat = middle.reshape({6});
  flat.data<float>()[5] = 7.0f;
  EXPECT_EQ(t.data<float>()[8], 7.0f);
  EXPECT_THROW(t.reshape({5}), InternalError);
  EXPECT_THROW(t.data<double>(), InternalError);
  EXPECT_THROW(t.rows(3, 5), InternalError);
}

// Element counts and byte sizes that overflow are refused before anything is allocated (a
// wrapped size allocated 64 bytes for 2^62 floats); a conversion to the same integer type is
// exact (through double, 2^53 + 1 became 2^53).
TEST(Tensor, OverflowingSizesAreRefusedAndSameTypeConversionsAreExact) {
  EXPECT_THROW(Tensor::zeros(Shape{std::int64_t{1} << 62}, DType::f32), Error);
  EXPECT_THROW(Tensor::zeros(Shape{std::int64_t{1} << 32, std::int64_t{1} << 32}, DType::f32), Error);
  EXPECT_THROW((void)Shape({std::int64_t{1} << 40, std::int64_t{1} << 40}).numel(), Error);
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{big, -big, 7}, Shape{3});
  EXPECT_EQ(ids.to(DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{big, -big, 7}));
}

TEST(Tensor, CloneIsDeep) {
  Tensor t = Tensor::full({3}, 1.5);
  Tensor c = t.clone();
  c.fill(0.0);
  EXPECT_EQ(t.data<float>()[0], 1.5f);
}

TEST(Tensor, HalfConversionRoundsToNearestEven) {
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even mantissa (1) wins.
  EXPECT_EQ(to_float(to_half(1.0f + 0x1.0p-11f)), 1.0f);
  EXPECT_EQ(to_float(to_half(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(to_float(to_half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(to_float(to_half(70000.0f))));
  EXPECT_EQ(to_float(to_half(0x1.0p-24f)), 0x1.0p-24f);  // smallest subnormal
  EXPECT_EQ(to_float(to_half(0x1.0p-26f)), 0.0f);
  EXPECT_TRUE(std::isnan(to_float(to_half(NAN))));
  // Exhaustive: every finite half round-trips through float.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    Half h{static_cast<std::uint16_t>(bits)};
    float f = to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_half(f).bits, h.bits) << "bits " << bits;
  }
}

TEST(Tensor, BFloat16ConversionRoundsToNearestEven) {
  EXPECT_EQ(to_float(to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  Tensor t = Tensor::from_vector<float>({1.0f, -2.5f, 3.140625f}, {3});
  auto back = t.to(DType::bf16).to(DType::f32).to_vector<float>();
  EXPECT_EQ(back, (std::vector<float>{1.0f, -2.5f, 3.140625f}));
}

TEST(Tensor, RebindMovesContentsIntoView) {
  Tensor flat = Tensor::zeros({10});
  Tensor grad = Tensor::full({2, 2}, 3.0);
  grad.rebind(flat.rows(4, 8).reshape({2, 2}));
  EXPECT_EQ(flat.data<float>()[4], 3.0f);
  EXPECT_EQ(flat.data<float>()[7], 3.0f);
  grad.data<float>()[0] = 9.0f;
  EXPECT_EQ(flat.data<float>()[4], 9.0f);
}

TEST(Tensor, DeviceTensorsGoThroughTheRegisteredBackend) {
  try {
    Tensor::empty({4}, DType::f32, Device::cuda(0));
    FAIL() << "a device tensor without a backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor backend for cuda:0"), std::string::npos) << e.what();
  }
  const testing::FakeDeviceLog& log = testing::install_fake_device();
  {
    const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
    Tensor device = Tensor::empty({3, 2}, DType::f32, Device::cuda(1));
    EXPECT_EQ(device.device(), Device::cuda(1));
    device.copy_from(host);
    Tensor twin = device.clone();  // device to device
    EXPECT_EQ(twin.device(), Device::cuda(1));
    twin.rows(1, 2).zero();
    Tensor back = Tensor::zeros({3, 2});
    back.copy_from(twin);
    EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{1, 2, 0, 0, 5, 6}));
    EXPECT_EQ(log.allocations, 2);
    EXPECT_EQ(log.to_device, 1);
    EXPECT_EQ(log.on_device, 1);
    EXPECT_EQ(log.to_host, 1);
    EXPECT_EQ(log.zeros, 1);
    EXPECT_EQ(log.releases, 0);
  }
  EXPECT_EQ(log.releases, 2);
}

}  // namespace
}  // namespace aiacc
