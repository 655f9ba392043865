// RecursiveDoublingAllreduce: latency-optimal allreduce for small buffers. log2(p) rounds in
// which partners (rank XOR 2^k) swap their whole buffers and add; with a world that is not a
// power of two, the ranks above the largest power p first fold their data into rank - p and
// get the result back at the end. ~log2(n) message latencies instead of the ring's 2(n-1).
// IEEE addition is commutative, so both partners form the same sum: every rank ends bitwise
// equal. Runs on stream 0, native wire only (compression does not pay for small buffers).
#pragma once

#include <memory>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {

class RecursiveDoublingAllreduce {
 public:
  // `buffer` must stay valid for the object's lifetime. ConfigError for unsupported dtypes.
  RecursiveDoublingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, ReduceOp op);

  // In-place sum or average across ranks. Blocks; TimeoutError/CommError name the peer.
  void run();

 private:
  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  ReduceOp op_;
  detail::WireFormat format_;
};

}  // namespace aiacc::ring
