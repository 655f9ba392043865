// CUDA tensors: after register_tensor_backend(), Tensor::empty(shape, dtype, Device::cuda(i))
// allocates from cuda::device_allocator(i) on this thread's current stream (core/cuda/stream.h),
// and copy_from / clone / zero work between the CPU and GPUs (host copies staged through pinned
// memory, core/cuda/copy.h). Built only with CUDA.
//
//   cuda::register_tensor_backend();
//   Tensor weights = Tensor::empty(Shape{1024, 512}, DType::f32, Device::cuda(0));
//   weights.copy_from(host_weights);   // returns once host_weights may change
//
// A tensor's memory belongs to the stream current at its allocation: work on another stream
// that uses it must be ordered with cudaStreamWaitEvent and the block marked with
// device_allocator(i).record_stream(ptr, stream_id(other)), as for any pooled block.
#pragma once

namespace aiacc::cuda {

// Installs the CUDA DeviceBackend for DeviceKind::cuda (idempotent, thread-safe).
void register_tensor_backend();

}  // namespace aiacc::cuda
