// GPU discovery. Safe to call on machines without a GPU or a driver: they report zero devices.
#pragma once

#include <string>

namespace aiacc::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

// "NVIDIA H100 80GB HBM3, compute 9.0, 79 GiB" for device `index`; throws CudaError.
std::string describe_device(int index);

}  // namespace aiacc::cuda
