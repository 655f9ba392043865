// GPU discovery. Safe to call on machines without a GPU or a driver: they report zero devices.
#pragma once

#include <string>

namespace aiacc::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
// Why device_count() found none when CUDA itself failed (no driver, a driver older than the
// runtime, a device not mapped into a container or namespace): "cudaGetDeviceCount: <text>
// (<name>)". Empty when it succeeded or plainly found no device.
std::string device_count_error();

// "NVIDIA H100 80GB HBM3, compute 9.0, 79 GiB" for device `index`; throws CudaError.
std::string describe_device(int index);

}  // namespace aiacc::cuda
