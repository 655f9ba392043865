// main() for GPU test programs: exits 77 (Meson's SKIP) with a reason when no CUDA device is
// usable, so the same binaries run in CI (skipped) and on GPU machines (executed).
#include <gtest/gtest.h>

#include <cstdio>

#include "core/cuda/device.h"

int main(int argc, char** argv) {
  const int devices = aiacc::cuda::device_count();
  if (devices == 0) {
    std::printf("SKIP: no CUDA device is available on this machine\n");
    return 77;
  }
  std::printf("running on %s\n", aiacc::cuda::describe_device(0).c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
