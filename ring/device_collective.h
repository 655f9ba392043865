// DeviceCollective: in-place collectives over device memory, for the dense gradients of workers
// whose models live on GPUs (NCCL on CUDA). ring/ knows no device API: the module that does
// registers a factory per device kind at start-up (aiacc-train's CUDA plugin registers NCCL's,
// ring/nccl/nccl_device_collective.h), and the trainer asks for one by kind. Tests register a
// fake that reduces the fake device's host memory through the CPU ring
// (tests/testing/fake_device_collective.h), so the wiring is checked without a GPU.
//
// Ordering follows the device's stream model: a collective starts after the work already
// queued on the calling thread's current stream of the device, and runs beside the work queued
// there after it (the rest of backward): that work must leave the buffer alone. Work queued on
// the stream after synchronize() sees every result. Calls return once the work is queued.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/net/rendezvous_client.h"
#include "core/tensor.h"
#include "ring/communicator.h"
#include "ring/reduce_op.h"

namespace aiacc::ring {

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;

  // In-place allreduce of `count` f32 elements at `device_data` (memory of the collective's
  // device). Every rank issues the same calls in the same order with the same counts. Throws
  // CommError/TimeoutError naming the rank when the work cannot be queued.
  virtual void allreduce(float* device_data, std::int64_t count, ReduceOp op) = 0;
  // Blocks until the work queued on the current stream so far is done (the host runs ahead of
  // the device: this is the end of backward there), so that the wait in synchronize() after it
  // is communication alone.
  virtual void wait_for_compute() = 0;
  // Blocks until every collective issued so far has finished on this rank, and orders the
  // current stream after them; CommError or TimeoutError (after the spec's timeout) naming the
  // rank and the operation otherwise.
  virtual void synchronize() = 0;
  // After synchronize(): seconds the collectives issued since the last call kept the device's
  // communication busy, overlapped with compute or not (NCCL: timing events around each part).
  virtual double take_busy_seconds() = 0;
  // For logs: "NCCL, 2 communicators on cuda:1".
  virtual std::string describe() const = 0;
};

// What a factory needs to join the collective (every rank at the same time: it is collective).
struct DeviceCollectiveSpec {
  net::RendezvousClient* rendezvous = nullptr;  // for exchanging ids (NCCL's unique ids)
  std::shared_ptr<Communicator> host;           // the same ranks' host communicator
  int rank = 0;
  int world_size = 1;
  Device device;
  int streams = 1;         // concurrent communicators (multi-stream), where the backend has them
  std::string name;        // unique per collective within a job (rendezvous keys)
  double timeout_s = 300;  // for joining, and for every synchronize()
  // After a collective fails, how long this rank waits for the others at the stall check
  // (with_stall_check); at most timeout_s. 0: no check.
  double stall_check_s = 10;
};

using DeviceCollectiveFactory = std::function<std::unique_ptr<DeviceCollective>(const DeviceCollectiveSpec&)>;

// Installs the factory for `kind` (replacing an earlier one).
void register_device_collective(DeviceKind kind, DeviceCollectiveFactory factory);
bool has_device_collective(DeviceKind kind);
// Joins through the factory of spec.device.kind, with the stall check below where the spec has a
// rendezvous client, several ranks and a stall_check_s. Throws ConfigError naming the device when
// none is registered, or whatever the factory throws.
std::unique_ptr<DeviceCollective> make_device_collective(const DeviceCollectiveSpec& spec);

// A device collective cannot say which peer it waits for (NCCL reports "not complete" or
// "remote process exited", never the rank), so a rank whose first allreduce(), wait_for_compute()
// or synchronize() throws CommError or TimeoutError meets the others at a barrier on the job's
// rendezvous store ("device-collective/<name>/stall-check") for up to `window_s`, and rethrows
// the error (same type) ending with what it found: the ranks that did not come (stopped, dead or
// cut off), or that every rank came (all alive: collectives issued in different orders, or a
// network fault), or that the store did not answer, or another rank's failure reported there
// meanwhile. Later failures pass unchanged. The collective's ranks are the job's ranks
// 0..world_size-1 (the workers; shards come after them). `rendezvous` must outlive the result
// and is used only on the calling thread.
std::unique_ptr<DeviceCollective> with_stall_check(std::unique_ptr<DeviceCollective> inner,
                                                   net::RendezvousClient& rendezvous, std::string name,
                                                   int world_size, double window_s);

}  // namespace aiacc::ring
