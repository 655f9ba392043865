// NcclCommunicator: one rank's GPU collectives over NCCL (DESIGN §4 "Backends", "Multi-stream").
// It owns K NCCL communicators, each with its own CUDA stream; an allreduce is split across the K
// so a large bucket keeps several communicators' kernels busy at once. Every NCCL call is
// non-blocking and polled against a deadline, so a missing or failed peer becomes a typed error
// (TimeoutError, CommError) naming the rank and the operation, never a hang.
//
// Ordering with the caller's stream: each collective waits for the work already queued on
// `caller_stream` (an event), and `caller_stream` waits for the collective (events recorded
// after each part), so the caller keeps using its stream as if the collective ran on it.
// `caller_stream` must belong to this communicator's device (0: that device's legacy stream).
//
// All ranks must issue the same collectives in the same order with the same counts, dtypes and
// stream weights (NCCL's rule for every communicator). A divergence is not detected here; it shows
// as a TimeoutError from synchronize() on the ranks left waiting.
//
// Thread-safety: none. One thread at a time per instance (NCCL communicators must not be used
// concurrently); different instances may be used from different threads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cuda/stream.h"
#include "core/net/deadline.h"
#include "core/net/rendezvous_client.h"
#include "core/tensor.h"
#include "ring/nccl/detail/stream_split.h"
#include "ring/reduce_op.h"

namespace aiacc::ring {

namespace detail {
class NcclCommGroup;
}

class NcclCommunicator {
 public:
  // More communicators than this only add NCCL memory and channels without more overlap.
  static constexpr int kMaxStreams = 32;

  // Joins the NCCL communicators named `name` as `rank` of `world_size` on CUDA device
  // `cuda_device`, with `streams` (K, 1..kMaxStreams) communicators and streams. Rank 0 creates
  // K NCCL ids and publishes them under the rendezvous key "nccl/<name>/ids"; the other ranks
  // fetch them. `name` must be unique per communicator within a job (the key is never cleared),
  // and every rank must pass the same `streams`. The K communicators' kernels run at once on one
  // GPU, so keep K small (2-4): NCCL only guarantees progress for concurrent communicators whose
  // kernels fit on the device together.
  // Blocks until every rank has joined or `deadline` passes. Throws ConfigError (bad rank, world
  // size, device or stream count), TimeoutError ("rank R ...: NCCL init timed out", or the
  // rendezvous key never appeared), CommError (NCCL failed; ranks disagree on K), CudaError.
  // `rendezvous` is used only during construction.
  NcclCommunicator(net::RendezvousClient& rendezvous, int rank, int world_size, int cuda_device,
                   int streams, std::string_view name, net::Deadline deadline);
  // Finalizes the communicators (waits at most detail::kTeardownTimeoutS for queued collectives,
  // which needs the peers), or aborts them when broken or during exception unwinding; then
  // releases streams and events. Never throws; failures are logged.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Relative share of each stream in allreduce (one weight per stream, >= 0, positive sum;
  // default: equal). Every rank must set the same weights before the same collective, or the
  // ranks' parts differ and the job hangs until synchronize() times out. ConfigError otherwise.
  void set_stream_weights(std::vector<double> weights);
  const std::vector<double>& stream_weights() const { return weights_; }

  // Longest a collective call may wait for NCCL to enqueue its work (the first collective also
  // connects to the peers, lazily). Default 300 s: generous for large jobs' first connect.
  void set_launch_timeout(double seconds);

  // In-place allreduce of `count` elements of `dtype` at `device_data` (device memory of this
  // communicator's device). Part k of detail::split_by_weights(count, ...) runs on stream k.
  // Returns once the work is queued: the result is ready for work queued on `caller_stream`
  // after this call, and for the host after synchronize() plus a sync of `caller_stream`.
  // `device_data` must stay allocated and untouched by other streams until then.
  // kAverage divides by the world size in NCCL (ncclAvg). Dtypes: f32, f64, f16, bf16, i32, i64
  // (ConfigError naming the dtype otherwise). Throws CommError/TimeoutError (after aborting
  // every communicator) when NCCL fails or cannot enqueue within the launch timeout.
  // With `caller_waits` false, `caller_stream` is not ordered after the collective: work queued
  // there next (the rest of backward) runs beside it; join() orders the caller stream later.
  void allreduce(void* device_data, std::int64_t count, DType dtype, ReduceOp op,
                 cudaStream_t caller_stream, bool caller_waits = true);

  // Orders `caller_stream` after every collective issued so far (no host wait).
  void join(cudaStream_t caller_stream);

  // Times each allreduce part on its stream (off by default: two timing events per part).
  void set_timing(bool on) { timing_ = on; }
  // After synchronize(): seconds the busiest stream spent in the allreduces issued since the
  // last call, each part from the moment its stream reached it (its inputs ready, the parts
  // before it on that stream done) to its end, peers' waits included. 0 with timing off.
  double take_busy_seconds();

  // In-place broadcast of `count` elements from rank `root`, on stream 0. Same ordering,
  // lifetime and error contract as allreduce; dtypes as allreduce plus u8.
  void broadcast(void* device_data, std::int64_t count, DType dtype, int root,
                 cudaStream_t caller_stream);

  // Gathers `count_per_rank` elements from every rank into `recv` (world_size * count_per_rank
  // elements, rank r's at r * count_per_rank), on stream 0. `send` may be recv's own slot for
  // this rank (in place). Same contract as broadcast.
  void allgather(const void* send, void* recv, std::int64_t count_per_rank, DType dtype,
                 cudaStream_t caller_stream);

  // Blocks until every collective issued so far has completed on this rank's streams, polling
  // the streams and NCCL's asynchronous error state. On an NCCL error: aborts the communicators
  // and throws CommError naming the rank and the collectives issued since the last
  // synchronize(); after `timeout_s` seconds: aborts and throws TimeoutError. Does not wait for
  // other work on the callers' streams.
  void synchronize(double timeout_s);
  // Waits for the work queued on `stream` so far (the caller's compute) while polling the
  // communicators as synchronize() does. A compute stream can end up behind NCCL's kernels
  // (a kernel loaded lazily on first launch waits for the device's running kernels), so a
  // plain cudaStreamSynchronize would hang with a dead peer: here that peer's error is a
  // CommError, and `timeout_s` without progress a TimeoutError, both naming the rank and op.
  void wait_for_stream(cudaStream_t stream, double timeout_s);

  // Aborts every communicator now (kernels in flight stop); later calls throw CommError. For
  // shutting down after a peer failed. Idempotent, never throws.
  void abort() noexcept;
  // True once an error, a timeout or abort() has aborted the communicators.
  bool aborted() const;

  // The parts allreduce uses for `count` elements of `dtype` with the current weights.
  std::vector<detail::StreamPart> plan(std::int64_t count, DType dtype) const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int cuda_device() const { return cuda_device_; }
  int streams() const { return static_cast<int>(streams_.size()); }
  const std::string& name() const { return name_; }

 private:
  void require_usable(std::string_view op) const;
  // The wait loop of synchronize() and wait_for_stream(): calls `done` (given the pending ops'
  // names) until it returns true, backing off between calls; TimeoutError (after aborting)
  // "not complete after S s <waiting> (limit L s); <hint>" once timeout_s has passed.
  void poll_until(double timeout_s, std::string_view waiting, std::string_view hint,
                  const std::function<bool(const std::string& ops)>& done);
  // Aborts the communicators and throws CudaError "<where>: <what>: <CUDA's text> (<name>)".
  [[noreturn]] void fail_on_cuda(cudaError_t status, std::string_view what);
  void check_device_pointer(const void* pointer, std::string_view op, std::string_view what) const;
  // Waits for NCCL to finish enqueueing on the communicators just used (non-blocking NCCL may
  // return ncclInProgress before the work is on the stream), then, with `caller_waits`, orders
  // caller_stream after the streams in `used`.
  void finish_launch(std::string_view op, const std::vector<std::size_t>& used,
                     cudaStream_t caller_stream, bool caller_waits = true);
  void note_pending(std::string_view op);
  // "allreduce/broadcast": the kinds of collective issued since the last synchronize(), for
  // error messages ("synchronize" when none).
  std::string pending_ops() const;

  int rank_;
  int world_size_;
  int cuda_device_;
  std::string name_;
  double launch_timeout_s_ = 300.0;
  std::vector<double> weights_;
  std::vector<std::string> pending_ops_;
  // Declared before comms_ so they are destroyed after the communicators that use them.
  std::vector<cuda::CudaStream> streams_;
  cuda::CudaEvent start_event_;               // recorded on caller_stream before a collective
  std::vector<cuda::CudaEvent> done_events_;  // one per stream, recorded after its part
  bool timing_ = false;
  // Per stream: (begin, end) timing events of the parts since take_busy_seconds(), reused.
  std::vector<std::vector<std::pair<cuda::CudaEvent, cuda::CudaEvent>>> timed_parts_;
  std::vector<std::size_t> timed_count_;
  std::unique_ptr<detail::NcclCommGroup> comms_;
};

}  // namespace aiacc::ring
