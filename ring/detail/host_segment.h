// HostSegment: one shared-memory segment that the ranks of one host map together, with a
// barrier over per-rank arrival counters kept in the segment. Internal to ring/: the
// single-host collectives (HierarchicalAllreduce, HostAllgather) lay their slots out in data().
//
// The barrier spins, then sleeps on a futex; it yields the core only where the local ranks
// outnumber the CPUs they may run on together (a peer may then be queued on this very core):
// elsewhere sched_yield would hand a busy neighbour process a whole time slice. A local rank that
// dies is noticed within ~100 ms (CommError naming it), a silent one at the deadline.
#pragma once

#include <sched.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/net/deadline.h"
#include "ring/communicator.h"
#include "ring/shared_memory.h"

namespace aiacc::ring::detail {

// Whether ranks with these CPU affinity masks cannot each have a CPU of their own: more ranks
// than CPUs in the union, or more ranks confined to some rank's mask than it has CPUs (a cheap
// test that catches pinned groups; not a full matching).
bool ranks_outnumber_cpus(std::span<const cpu_set_t> masks);

class HostSegment {
 public:
  // Collective among `local_ranks` (this rank among them; the first creates the segment and
  // passes its name to the others over their stream-0 channels). `tag` makes the name unique
  // (the same value on every local rank); `owner` names the collective in errors.
  HostSegment(Communicator& comm, const std::vector<int>& local_ranks, std::size_t data_bytes,
              std::uint64_t tag, std::string owner);

  // The data region: page aligned, zero-filled at creation, `data_bytes` long.
  std::byte* data() const { return memory_.data() + control_bytes_; }
  int local_index() const { return local_index_; }
  int local_size() const { return static_cast<int>(local_ranks_.size()); }
  // Whether the local ranks outnumber the CPUs they may run on (true until a barrier has passed).
  bool oversubscribed() const { return oversubscribed_; }

  // Marks this rank as past barrier `generation` (numbers grow by one per barrier, the same on
  // every local rank) and waits until every local rank is. Errors read "OWNER (WHAT): ...".
  void wait_all(std::uint64_t generation, std::string_view what, net::Deadline deadline);

 private:
  void wait_for_arrivals(std::uint64_t generation, std::string_view what, net::Deadline deadline);

  std::string owner_;
  std::vector<int> local_ranks_;
  int local_index_ = 0;
  // More local ranks than CPUs in the union of their affinity masks, or more ranks confined to
  // some rank's mask than it has CPUs. Assumed until the first barrier has passed, when every
  // rank's mask is in the segment.
  bool oversubscribed_ = true;
  bool cpus_known_ = false;
  std::size_t control_bytes_ = 0;
  SharedMemory memory_;
};

}  // namespace aiacc::ring::detail
