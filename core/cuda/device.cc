#include "core/cuda/device.h"

#include <fmt/format.h>

#include "core/cuda/cuda_check.h"

namespace aiacc::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" status
    return 0;
  }
  return count;
}

std::string device_count_error() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess || status == cudaErrorNoDevice) return {};
  (void)cudaGetLastError();
  return fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}

std::string describe_device(int index) {
  cudaDeviceProp properties{};
  AIACC_CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  return fmt::format("{}, compute {}.{}, {} GiB", properties.name, properties.major,
                     properties.minor, properties.totalGlobalMem >> 30);
}

}  // namespace aiacc::cuda
