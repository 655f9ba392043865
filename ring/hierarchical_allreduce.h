// HierarchicalAllreduce: ranks on one host reduce through shared memory, the sums cross
// between hosts on rings, and every local rank copies the result out. Within a host nothing
// crosses TCP. Where every host has the same number L of ranks, each rank writes the slices of
// its input that other local ranks own into its slot of a shared segment, sums its own 1/L
// slice of the host into the segment's result, runs the ring between hosts on that slice with
// the ranks of its local index (L rings at once, each over 1/L of the buffer), and copies the
// whole result back. On uneven hosts one leader per host runs the ring on the host's whole sum.
// Result is bitwise equal on every rank (one copy of each slice's sums is shared).
// On a single host (no leaders' ring) the buffer goes in chunks that stay in cache: each rank
// writes only the slices other ranks sum, sums its own slice, and copies the others' sums out,
// one barrier a chunk, pipelined. Small chunks instead have each rank sum all L slots of a chunk
// into its own buffer, in the same order as every other rank: one barrier a chunk, no copy out.
// Every sum runs in local-rank order from one copy of the inputs: all ranks hold the same bits.
//
// Synchronisation inside the host is by per-rank arrival counters in the segment (spinning,
// then sleeping: detail/host_segment.h); a local rank that dies is noticed within ~100 ms (its
// process is gone: CommError naming it), a silent one at the communicator's timeout.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/ring_allreduce.h"
#include "ring/detail/host_segment.h"

namespace aiacc::ring {

class HierarchicalAllreduce {
 public:
  // Collective among all ranks (the leader creates the segment and passes its name to its local
  // ranks over their links). `buffer` stays valid for the object's lifetime. The rings between
  // hosts use spec.chunk_bytes and spec.wire: with fp16/bf16 there, an average is pre-scaled
  // by 1/n before the ring and a ring whose result is not finite is redone in fp32 (as
  // Allreduce does for the flat ring); within a host every sum is exact whatever the wire.
  HierarchicalAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec);

  // In-place sum or average across all ranks. Blocks. Returns true where this rank's ring
  // between hosts fell back to fp32 (a compressed wire's result was not finite).
  bool run();

  // How this rank's host takes part, fixed at construction (the same on every rank of a host).
  enum class HostPath {
    alone,         // the only rank on its host: its buffer goes to the leaders' ring as it is
    direct,        // one host, small chunks: every rank sums all the slots of a chunk itself
    scattered,     // one host: each rank sums one slice of every chunk, the others copy it out
    across_hosts,  // several hosts, not all with as many ranks: host sum, leaders' ring, copy back
    across_hosts_sliced,  // several hosts of L ranks each: local rank l rings slice l between hosts
  };
  HostPath path() const { return path_; }

 private:
  std::byte* slot(int local) const;
  // The direct path's slot of `local` for the chunk of barrier `generation` (two sets, by parity).
  std::byte* direct_slot(std::uint64_t generation, int local) const;
  // The scattered path's slot of `local` (L: the result) for chunk `chunk` of a run (two sets,
  // by parity).
  std::byte* scattered_slot(std::int64_t chunk, int local) const;
  std::byte* scattered_result(std::int64_t chunk) const;
  void run_scattered(net::Deadline deadline);
  bool run_sliced(net::Deadline deadline);
  // Runs a ring between hosts; with a compressed wire, pre-scales an average and falls back to
  // `fallback` (the same ring in fp32) when the result is not finite. Returns true on fallback.
  bool run_between_hosts(RingAllreduce& ring, std::optional<RingAllreduce>& fallback);
  // The ranks of this rank's local index on every host, hosts in leader order; empty where the
  // hosts do not all have as many ranks as this one.
  std::vector<int> slice_ring_members() const;
  // result[offset, +count elements) = the sum of every local slot there, in local-rank order
  // (`offset` in bytes).
  void sum_slots(std::size_t offset, std::size_t count);

  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  AllreduceSpec spec_;
  std::vector<int> local_ranks_;
  int local_index_ = 0;
  std::optional<detail::HostSegment> segment_;  // when several ranks share this host
  std::size_t slot_bytes_ = 0;
  std::int64_t chunk_elements_ = 1;
  HostPath path_ = HostPath::alone;
  std::vector<const std::byte*> slot_inputs_;  // scratch: the slots being summed, in local-rank order
  std::byte* result_ = nullptr;
  std::optional<RingAllreduce> leaders_ring_;  // on leaders, when there are several uneven hosts
  std::optional<RingAllreduce> slice_ring_;    // on every rank, when there are several even hosts
  // A compressed wire between hosts: the rings' fp32 twins, the ring's input saved to redo it
  // from, and whether an average was pre-scaled (then it is not scaled again at the end).
  std::optional<RingAllreduce> leaders_fallback_, slice_fallback_;
  std::vector<std::byte> saved_ring_input_;
  bool prescaled_ = false;
  std::uint64_t generation_ = 0;
};

}  // namespace aiacc::ring
