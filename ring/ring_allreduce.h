// RingAllreduce: bandwidth-optimal allreduce for large buffers (PAISoar's ring). The buffer is
// split across the communicator's streams by their weights; on each stream, a ring
// reduce-scatter then all-gather over n segments, each moved in chunks that are posted without
// waiting, so reducing chunk c overlaps sending chunk c+1 and the next hop starts on a chunk as
// soon as it is reduced. Each rank sends and receives 2(n-1)/n of the buffer.
//
// With an fp16/bf16 wire, chunks are converted in staging buffers and accumulated in fp32; the
// owner of each segment rounds its final values through the wire type too, so every rank ends
// with bitwise the same result (the overflow check that follows relies on it).
#pragma once

#include <memory>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {

class RingAllreduce {
 public:
  // Setup: validates the dtype/wire pair (ConfigError) and allocates staging for a converting
  // wire. `buffer` must stay valid for the object's lifetime; every rank builds it with the
  // same count, dtype and spec (a size mismatch is detected on the first chunk: CommError).
  // `members`: the ranks of the ring in ring order (this rank among them; every member passes
  // the same list); empty: all ranks. Hierarchical allreduce runs it between hosts.
  RingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec, std::vector<int> members = {});

  // Reduces the buffer in place across all ranks: the sum (or the average: each segment's owner
  // scales its sum by 1/n). Blocks until done; TimeoutError/CommError name the peer, stream and
  // step. Uses the communicator's stream threads: one collective at a time per communicator.
  void run();

  const Buffer& buffer() const { return buffer_; }
  // Per stream, the bytes it carried and the seconds it took in the last run() (StreamBalancer).
  const StreamTimings& stream_timings() const { return timings_; }

 private:
  void run_stream(int stream, Range slice, net::Deadline deadline);

  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  AllreduceSpec spec_;
  std::vector<int> members_;
  int position_ = 0;  // of this rank in members_
  detail::WireFormat format_;
  std::int64_t chunk_elements_;
  // Converting wire only: the wire form of each element sent in reduce-scatter, and of the
  // segment this rank finalises, indexed by element (each element is sent at most once from
  // each, so nothing is overwritten while the transport may still read it).
  std::vector<std::byte> scatter_stage_, gather_stage_;
  StreamTimings timings_;
};

}  // namespace aiacc::ring
