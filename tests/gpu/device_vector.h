// Test helper for GPU tests: a device copy of a host vector (memory from the caching allocator,
// legacy default stream), read back after a device-wide sync; and the comparison they share.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"

namespace aiacc::testing {

template <class T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host)
      : size_(host.size()), buffer_(cuda::device_allocator(0), std::max<std::size_t>(size_, 1) * sizeof(T), 0) {
    AIACC_CUDA_CHECK(cudaMemcpy(buffer_.get(), host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* get() const { return buffer_.data<T>(); }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    AIACC_CUDA_CHECK(cudaDeviceSynchronize());
    AIACC_CUDA_CHECK(cudaMemcpy(host.data(), buffer_.get(), size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  std::size_t size_;
  memory::PooledBuffer buffer_;
};

// |got - want| <= tolerance * max(1, |want|) element by element.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tolerance,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0f, std::fabs(want[i]))) << what << " element " << i;
  }
}

}  // namespace aiacc::testing
