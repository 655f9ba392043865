// The K NCCL communicators of one rank, created non-blocking (ncclConfig_t::blocking = 0) so no
// NCCL call can hang the host: initialisation, enqueueing and teardown are polled against
// deadlines, and any failure aborts all K, because after one fails the ranks' sequences of
// collectives can no longer be trusted to match.
#pragma once

#include <nccl.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/net/deadline.h"

namespace aiacc::ring::detail {

// Teardown budget: ncclCommFinalize waits for in-flight collectives, which need every peer. 30 s
// covers a slow peer; a dead one costs 30 s at exit (then the communicators are aborted) rather
// than a hang.
inline constexpr double kTeardownTimeoutS = 30.0;

// Sleeps between polls: yields at first (collectives often finish within microseconds), then
// sleeps from 10 us doubling to 1 ms, so a long wait costs little CPU and at most ~1 ms latency.
class PollBackoff {
 public:
  void wait();

 private:
  int polls_ = 0;
  long sleep_us_ = 10;
};

class NcclCommGroup {
 public:
  // Creates ids.size() communicators (communicator k from ids[k]) for `rank` of `world_size` on
  // the current CUDA device, inside one ncclGroupStart/End, and polls until all are ready.
  // Blocks until then or `deadline`. Throws TimeoutError ("rank R ...: NCCL init ... did not
  // complete") or CommError (an NCCL failure, with NCCL's message), both after aborting every
  // communicator created. `name` (e.g. "grads") appears in messages and NCCL's own logs.
  NcclCommGroup(std::span<const ncclUniqueId> ids, int rank, int world_size, std::string name,
                net::Deadline deadline);
  // Healthy: finalizes all (flushing queued collectives), waits at most kTeardownTimeoutS, then
  // destroys; aborts instead when already failed, when finalizing fails or times out, or while
  // an exception unwinds the stack (peers may be gone). Never throws; failures are logged.
  ~NcclCommGroup();
  NcclCommGroup(const NcclCommGroup&) = delete;
  NcclCommGroup& operator=(const NcclCommGroup&) = delete;

  std::size_t size() const { return comms_.size(); }
  ncclComm_t comm(std::size_t k) const { return comms_[k]; }
  bool aborted() const { return aborted_; }
  // Why the group was aborted (empty while healthy).
  const std::string& abort_reason() const { return abort_reason_; }
  // "rank 1 of 4, NCCL 'grads'": the prefix of every message.
  std::string where() const;

  // Polls each communicator's state once. Returns true when none is in progress (an enqueue,
  // init or finalize still running in NCCL's background). On an NCCL error: aborts all, then
  // throws CommError naming the rank, `op`, the communicator and NCCL's message.
  bool poll(std::string_view op);
  // poll() until true; at `deadline`: aborts all, throws TimeoutError naming the rank and `op`.
  void wait_ready(std::string_view op, net::Deadline deadline);

  // Aborts every communicator (frees them; kernels in flight stop). Idempotent, never throws.
  void abort(std::string_view reason) noexcept;
  // abort(), then throws CommError (or TimeoutError when `timeout`): "<where>: NCCL <op> ...".
  [[noreturn]] void fail(std::string_view op, std::string_view detail, bool timeout = false);
  // NCCL's description of `result` on communicator k, with ncclGetLastError's details.
  std::string describe(ncclResult_t result, std::size_t k) const;

 private:
  void finalize_and_destroy() noexcept;

  int rank_;
  int world_size_;
  std::string name_;
  std::vector<std::string> comm_names_;  // ncclConfig_t::commName must outlive the async init
  std::vector<ncclComm_t> comms_;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace aiacc::ring::detail
