// HalvingDoublingAllreduce (Rabenseifner's algorithm): a reduce-scatter by recursive halving,
// then an all-gather by recursive doubling. In round k partners rank XOR 2^k swap half of what
// each still reduces, so each rank sends and receives 2(n-1)/n of the buffer, as in the ring,
// but in 2 log2(n) rounds instead of 2(n-1). Where a round's latency and the hand-offs between
// processes that share cores count (4 ranks on 2 cores, 1-4 MiB: 4 rounds instead of 6) it is
// the faster of the two.
//
// Multi-stream like the ring: the buffer is split across the communicator's streams by their
// weights and each stream runs the rounds on its slice; within a round the half is sent in
// chunks of spec.chunk_bytes, so adding one chunk overlaps receiving the next. A world that is
// not a power of two folds its ranks above the largest power p into rank - p first and hands
// them the result at the end (their partners then move the buffer twice more: Allreduce picks
// this algorithm for powers of two only). One rank finalises each element (the average scaled
// there) and the all-gather copies it, so every rank ends bitwise equal. Native wire only.
#pragma once

#include <memory>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {

class HalvingDoublingAllreduce {
 public:
  // `buffer` must stay valid for the object's lifetime. ConfigError for unsupported dtypes or a
  // compressed wire.
  HalvingDoublingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec);

  // In-place sum or average across ranks. Blocks; TimeoutError/CommError name the peer, stream
  // and round. Uses the communicator's stream threads: one collective at a time.
  void run();

  // Per stream, the bytes it carried and the seconds it took in the last run() (StreamBalancer).
  const StreamTimings& stream_timings() const { return timings_; }

 private:
  void run_stream(int stream, Range slice, net::Deadline deadline);

  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  AllreduceSpec spec_;
  detail::WireFormat format_;
  std::int64_t chunk_elements_;
  // The partner's chunks in a halving round, received before they are added: each stream uses
  // the part at its own slice (at most half of it is needed), so streams never share bytes.
  std::vector<std::byte> incoming_;
  StreamTimings timings_;
};

}  // namespace aiacc::ring
