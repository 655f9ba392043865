// The DeviceBackend behind CUDA tensors.
#include "core/cuda/tensor_backend.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>

#include "core/cuda/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor.h"

namespace aiacc::cuda {
namespace {

class CudaTensorBackend final : public DeviceBackend {
 public:
  void* allocate(std::size_t bytes, int index) override {
    return device_allocator(index).allocate(bytes, stream_id(current_stream()));
  }

  void release(void* ptr, int index) noexcept override {
    try {
      device_allocator(index).free(ptr);
    } catch (const std::exception& e) {
      try {
        log::get("cuda")->error("releasing tensor memory on cuda:{} failed: {}", index, e.what());
      } catch (...) {
        // Nothing more to do in a noexcept path.
      }
    }
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) override {
    const cudaStream_t stream = current_stream();
    if (src_device.is_cpu()) {
      copy_host_to_device(dst, src, bytes, dst_device.index, stream);
    } else if (dst_device.is_cpu()) {
      copy_device_to_host(dst, src, bytes, src_device.index, stream);
    } else if (src_device == dst_device) {
      DeviceGuard guard(dst_device.index);
      AIACC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    } else {
      // A copy between two GPUs of one process (rare: the trainer gives each process one) is
      // not ordered with the source device's streams: wait for the source's queued work, and
      // for the copy before returning, so that neither device's stream-ordered reuse of a
      // freed block can meet it half done.
      {
        DeviceGuard source(src_device.index);
        AIACC_CUDA_CHECK(cudaDeviceSynchronize());
      }
      DeviceGuard guard(dst_device.index);
      AIACC_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream));
      AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }

  void zero(void* dst, int index, std::size_t bytes) override {
    DeviceGuard guard(index);
    AIACC_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, current_stream()));
  }
};

}  // namespace

void register_tensor_backend() {
  static std::once_flag once;
  std::call_once(once, [] { register_device_backend(DeviceKind::cuda, std::make_unique<CudaTensorBackend>()); });
}

}  // namespace aiacc::cuda
