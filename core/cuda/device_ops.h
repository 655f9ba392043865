// DeviceOps (core/device_ops.h) for CUDA devices: GEMMs through cuBLAS (core/cuda/linear.h),
// our kernels for ReLU, the loss and the optimiser updates (core/cuda/kernels/), all on the
// calling thread's current stream (core/cuda/stream.h). One cuBLAS handle per thread and device.
//   cuda::register_tensor_backend();
//   cuda::register_device_ops();   // layers and the optimiser then run CUDA tensors on the GPU
// Built only with CUDA and nvcc.
#pragma once

namespace aiacc::cuda {

void register_device_ops();

}  // namespace aiacc::cuda
