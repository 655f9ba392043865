// NCCL as the DeviceCollective of CUDA devices (ring/device_collective.h): the trainer's dense
// gradients of workers on GPUs are all-reduced by an NcclCommunicator, queued on the calling
// thread's current stream (cuda::current_stream(), the stream the layers' kernels run on).
#pragma once

namespace aiacc::ring {

// Registers the NCCL factory for DeviceKind::cuda. Called by aiacc-train's CUDA plugin.
void register_nccl_device_collective();

}  // namespace aiacc::ring
