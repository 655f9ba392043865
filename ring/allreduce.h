// Allreduce: the allreduce the trainer and benchmarks call. Picks the algorithm by size
// (recursive doubling below `small_bytes`, the multi-stream ring above) and implements the
// compressed wire's safety net: with fp16/bf16 on the wire, an average is pre-scaled by 1/n
// before conversion (partial sums then stay within the input's range), and if the result holds
// an inf or NaN (an overflow on the wire, or non-finite inputs) the bucket is reduced again in
// fp32 from a saved copy of the input. Ring results are bitwise equal on every rank, so all
// ranks take that decision alike without exchanging a message.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/hierarchical_allreduce.h"
#include "ring/recursive_doubling_allreduce.h"
#include "ring/ring_allreduce.h"

namespace aiacc::ring {

struct AllreduceTuning {
  // Buffers smaller than this use recursive doubling (latency-bound); larger ones the ring.
  // 512 KiB: below it the ring's 2(n-1) message latencies cost more than recursive doubling's
  // log2(n) full-buffer transfers (aiacc-bench allreduce over TCP, 2 and 4 ranks: 512 KiB took
  // 151 vs 317 us and 539 vs 716 us; 1 MiB was about even, 4 MiB 1.6x faster on the ring).
  std::int64_t small_bytes = 512 * 1024;
  // Below this a buffer is bound by message latency alone. A compressed wire uses recursive
  // doubling only there (it sends native values; above, the halved bytes pay), and where ranks
  // share hosts across several hosts only such buffers skip the shared-memory stage.
  static constexpr std::int64_t kLatencyBoundBytes = 64 * 1024;
  // Where several ranks share a host, reduce through shared memory first and run the ring
  // between host leaders only (native wire; a compressed wire keeps the flat ring).
  bool hierarchical = true;
};

class Allreduce {
 public:
  // Setup for one buffer (kept valid by the caller for the object's lifetime): validates the
  // dtype/wire pair and allocates the staging and fallback copy the wire needs.
  Allreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec, AllreduceTuning tuning = {});

  // In place; blocks; one collective at a time per communicator. Returns true if this call fell
  // back to fp32 because the compressed result was not finite.
  bool run();

  // How many run() calls fell back to fp32 so far.
  std::int64_t fallbacks() const { return fallbacks_; }
  const char* algorithm() const;  // "recursive doubling", "hierarchical", "ring"
  // The ring, when this buffer uses it (its per-stream timings feed the StreamBalancer).
  const RingAllreduce* ring() const { return ring_ ? &*ring_ : nullptr; }
  const Buffer& buffer() const { return buffer_; }

 private:
  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  AllreduceSpec spec_;
  std::optional<RecursiveDoublingAllreduce> small_;
  std::optional<HierarchicalAllreduce> hierarchical_;
  std::optional<RingAllreduce> ring_;       // with spec_.wire
  std::optional<RingAllreduce> fallback_;   // fp32 wire, for a compressed ring's overflow
  std::vector<std::byte> saved_input_;
  std::int64_t fallbacks_ = 0;
};

}  // namespace aiacc::ring
