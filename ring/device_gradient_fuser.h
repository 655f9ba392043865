// DeviceGradientFuser: gradient fusion for models on GPUs, with the collectives on the devices
// (NCCL through a DeviceCollective) instead of the CPU ring. As in GradientFuser, the
// parameters' gradients are rebound at construction to views of one flat buffer, here in device
// memory, laid out in ready order; a bucket's allreduce is queued the moment its last gradient is
// final, from the grad-ready hook on the training thread. The device orders it after the
// backward kernels that wrote the bucket and runs it beside the ones still to come, so no
// communication thread is needed: queueing is all the host does during backward.
//
// Buckets are queued in plan order (a bucket complete early waits for the ones before it), so
// every rank issues the same collectives in the same order, as NCCL requires. finish_step()
// queues whatever is left (parameters whose hook did not fire contribute their current
// gradient) and waits for all of it, which is where a failed or silent peer is reported; a
// failure is kept, and every later step rethrows it.
//
// Thread-safety: none; the hooks and both step calls run on the training thread.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "core/net/deadline.h"
#include "core/parameter.h"
#include "ring/bucket_plan.h"
#include "ring/communicator.h"
#include "ring/device_collective.h"
#include "ring/gradient_sync.h"

namespace aiacc::ring {

class DeviceGradientFuser : public GradientSync {
 public:
  // `parameters`: the dense parameters in gradient-ready order, f32, on one non-CPU device,
  // alive at fixed addresses for the fuser's lifetime (their hooks point back to it). `host`:
  // the same ranks' host communicator, on which the bucket layout is verified at construction
  // (ConfigError on every rank on a mismatch; collective). `bucket_bytes` as in FusionOptions.
  DeviceGradientFuser(std::unique_ptr<DeviceCollective> collective, std::shared_ptr<Communicator> host,
                      std::vector<Parameter*> parameters, std::int64_t bucket_bytes, ReduceOp op);
  DeviceGradientFuser(const DeviceGradientFuser&) = delete;
  DeviceGradientFuser& operator=(const DeviceGradientFuser&) = delete;

  void begin_step() override;
  void finish_step() override;
  // The wait for the collectives once backward has finished on the device.
  double last_exposed_seconds() const override { return exposed_seconds_; }
  // The collectives' busy time on the device (DeviceCollective::take_busy_seconds).
  double last_communication_seconds() const override { return communication_seconds_; }

  const BucketPlan& plan() const { return plan_; }
  const DeviceCollective& collective() const { return *collective_; }
  // Buckets queued so far over the fuser's life (tests: all of them, in plan order).
  std::int64_t buckets_queued() const { return buckets_queued_; }

 private:
  void on_ready(int tensor);
  // Queues every bucket from next_bucket_ on whose gradients are all final, in plan order.
  void queue_ready_buckets();

  std::unique_ptr<DeviceCollective> collective_;
  std::vector<Parameter*> parameters_;
  ReduceOp op_;
  Tensor flat_;  // device memory; every parameter's gradient is a view of it (ready order)
  BucketPlan plan_;
  std::vector<char> tensor_ready_;
  std::vector<int> bucket_pending_;  // tensors not yet final, per bucket
  std::size_t next_bucket_ = 0;      // the first bucket not yet queued this step
  bool in_step_ = false;
  std::exception_ptr error_;  // a failed collective: every later step rethrows it
  std::int64_t buckets_queued_ = 0;
  double exposed_seconds_ = 0;
  double communication_seconds_ = 0;
};

}  // namespace aiacc::ring
