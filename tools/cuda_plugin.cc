// The CUDA plugin of aiacc-train (libaiacc_cuda.so): CUDA tensors and layer ops, loaded only by
// a job whose job.device is a GPU, so CPU jobs neither load CUDA's libraries (a few hundred
// megabytes mapped, 0.1 s per process) nor need them installed. It is linked against the core
// symbols of the program that loads it (aiacc-train exports them): the registries it fills are
// the program's own.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/cuda/device_ops.h"
#include "core/cuda/tensor_backend.h"
#if defined(AIACC_HAVE_NCCL)
#include "ring/nccl/nccl_device_collective.h"
#endif

// Registers CUDA for tensors and layers (and NCCL for dense gradients, where built) after checking that `device` exists. Returns 0, or 1
// with a message in `error`.
extern "C" __attribute__((visibility("default"))) int aiacc_cuda_plugin_register(int device, char* error,
                                                                               std::size_t error_size) {
  try {
    const int devices = aiacc::cuda::device_count();
    if (device >= devices) {
      const std::string why = devices == 0 ? aiacc::cuda::device_count_error() : std::string();
      std::snprintf(error, error_size, "this machine has %d CUDA device(s)%s%s%s", devices,
                    why.empty() ? "" : " (", why.c_str(), why.empty() ? "" : ")");
      return 1;
    }
    // The worker's GPU becomes the current device of this thread (the one that trains): the
    // device guards restore it, so its steps create no context on GPU 0 for a worker of
    // another GPU.
    AIACC_CUDA_CHECK(cudaSetDevice(device));
    aiacc::cuda::register_tensor_backend();
    aiacc::cuda::register_device_ops();
#if defined(AIACC_HAVE_NCCL)
    aiacc::ring::register_nccl_device_collective();  // several workers' dense gradients on their GPUs
#endif
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}
