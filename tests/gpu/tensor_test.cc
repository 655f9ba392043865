// CUDA tensors through the registered backend: round trips of sizes below and above the staging
// chunk (so the two pinned chunks alternate), views at an offset, device clones, zeroing, and
// allocation on the current stream. Skipped (exit 77) where no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/cuda/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/cuda/tensor_backend.h"
#include "core/tensor.h"

namespace aiacc::cuda {
namespace {

class GpuTensor : public ::testing::Test {
 protected:
  void SetUp() override { register_tensor_backend(); }
};

std::vector<float> counting(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 100003) * 0.5f;
  return v;
}

TEST_F(GpuTensor, RoundTripsBelowAndAboveTheStagingChunk) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, kStagingChunkBytes / 4 * 3 + 17}) {
    const Tensor host = Tensor::from_vector(counting(n), {static_cast<std::int64_t>(n)});
    Tensor device = Tensor::empty(host.shape(), DType::f32, Device::cuda(0));
    device.copy_from(host);
    Tensor back = Tensor::zeros(host.shape());
    back.copy_from(device);
    EXPECT_EQ(back.to_vector<float>(), host.to_vector<float>()) << n << " floats";
  }
}

TEST_F(GpuTensor, ViewsClonesAndZeroing) {
  const Tensor host = Tensor::from_vector(counting(12), {4, 3});
  Tensor device = Tensor::empty({4, 3}, DType::f32, Device::cuda(0));
  device.copy_from(host);
  Tensor twin = device.clone();
  twin.rows(1, 3).zero();
  Tensor part = Tensor::zeros({2, 3});
  part.copy_from(device.rows(2, 4));  // a view at an offset, copied out
  Tensor back = Tensor::zeros({4, 3});
  back.copy_from(twin);
  const auto h = host.to_vector<float>();
  EXPECT_EQ(part.to_vector<float>(), std::vector<float>(h.begin() + 6, h.end()));
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{h[0], h[1], h[2], 0, 0, 0, 0, 0, 0, h[9], h[10], h[11]}));
}

TEST_F(GpuTensor, AllocatesOnTheCurrentStream) {
  const CudaStream stream = CudaStream::create_non_blocking();
  const auto before = device_allocator(0).stats().bytes_in_use;
  void* block = nullptr;
  {
    StreamScope scope(stream.get());
    EXPECT_EQ(current_stream(), stream.get());
    Tensor t = Tensor::zeros({1 << 20}, DType::f32, Device::cuda(0));
    block = t.raw_data();
    Tensor back = Tensor::full({1 << 20}, 3.0);
    back.copy_from(t);  // ordered after the zeroing on the same stream
    EXPECT_EQ(back.to_vector<float>(), std::vector<float>(1 << 20, 0.0f));
    EXPECT_GE(device_allocator(0).stats().bytes_in_use, before + (4u << 20));
  }
  EXPECT_EQ(current_stream(), nullptr);
  EXPECT_EQ(device_allocator(0).stats().bytes_in_use, before);
  // The block went back to `stream`'s pool: another stream does not get it, `stream` does.
  Tensor on_default = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
  EXPECT_NE(on_default.raw_data(), block);
  StreamScope scope(stream.get());
  Tensor on_stream = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
  EXPECT_EQ(on_stream.raw_data(), block);
}

}  // namespace
}  // namespace aiacc::cuda
