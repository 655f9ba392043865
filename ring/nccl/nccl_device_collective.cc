#include "ring/nccl/nccl_device_collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "ring/device_collective.h"
#include "ring/nccl/nccl_communicator.h"

namespace aiacc::ring {
namespace {

class NcclDeviceCollective : public DeviceCollective {
 public:
  explicit NcclDeviceCollective(const DeviceCollectiveSpec& spec)
      : timeout_s_(spec.timeout_s),
        comm_(*spec.rendezvous, spec.rank, spec.world_size, spec.device.index,
              std::min(spec.streams, NcclCommunicator::kMaxStreams), spec.name,
              net::deadline_after(spec.timeout_s)) {
    comm_.set_timing(true);
    // The first allreduce connects to the peers: it too waits no longer than the job says.
    comm_.set_launch_timeout(spec.timeout_s);
  }

  // The caller's stream does not wait for the collective: it goes on with the rest of backward
  // while NCCL reduces the bucket on its own streams. synchronize() joins them.
  void allreduce(float* device_data, std::int64_t count, ReduceOp op) override {
    comm_.allreduce(device_data, count, DType::f32, op, cuda::current_stream(), /*caller_waits=*/false);
  }
  void wait_for_compute() override { comm_.wait_for_stream(cuda::current_stream(), timeout_s_); }
  void synchronize() override {
    comm_.join(cuda::current_stream());
    comm_.synchronize(timeout_s_);
  }
  double take_busy_seconds() override { return comm_.take_busy_seconds(); }
  std::string describe() const override {
    return fmt::format("NCCL, {} communicator{} on cuda:{}", comm_.streams(), comm_.streams() == 1 ? "" : "s",
                       comm_.cuda_device());
  }

 private:
  double timeout_s_;
  NcclCommunicator comm_;
};

}  // namespace

void register_nccl_device_collective() {
  register_device_collective(DeviceKind::cuda, [](const DeviceCollectiveSpec& spec) -> std::unique_ptr<DeviceCollective> {
    if (spec.rendezvous == nullptr) throw InternalError("NCCL device collective: no rendezvous client");
    return std::make_unique<NcclDeviceCollective>(spec);
  });
}

}  // namespace aiacc::ring
