// A stand-in for aiacc-train's CUDA plugin (tools/cuda_plugin.cc) in tests: registers the fake
// accelerator of tests/testing/fake_device.h, pretending the machine has kDevices GPUs, so the
// real program run as several processes (AIACC_CUDA_PLUGIN=this library) takes its device paths
// on a machine without a GPU; several workers' dense gradients go through the fake device
// collective (NCCL's stand-in). Like the real plugin it uses the core and ring symbols of the
// program that loads it, so the registries it fills are the program's own.
#include <cstddef>
#include <cstdio>

#include "tests/testing/fake_device.h"
#include "tests/testing/fake_device_collective.h"

namespace {
constexpr int kDevices = 4;
}  // namespace

extern "C" __attribute__((visibility("default"))) int aiacc_cuda_plugin_register(int device, char* error,
                                                                               std::size_t error_size) {
  if (device >= kDevices) {
    std::snprintf(error, error_size, "this machine has %d CUDA device(s) (fake)", kDevices);
    return 1;
  }
  aiacc::testing::install_fake_device();
  aiacc::testing::install_fake_device_collective();  // NCCL's stand-in: the CPU ring on the fake memory
  std::fprintf(stderr, "fake CUDA plugin: device %d\n", device);
  return 0;
}
