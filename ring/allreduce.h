// Allreduce: the allreduce the trainer and benchmarks call. Picks the algorithm by size
// (recursive doubling below `small_bytes`, halving-doubling up to `halving_doubling_bytes` on
// power-of-two worlds above 2, the multi-stream ring above) and implements the
// compressed wire's safety net: with fp16/bf16 on the wire, an average is pre-scaled by 1/n
// before conversion (partial sums then stay within the input's range), and if the result holds
// an inf or NaN (an overflow on the wire, or non-finite inputs) the bucket is reduced again in
// fp32 from a saved copy of the input. Ring results are bitwise equal on every rank, so all
// ranks take that decision alike without exchanging a message.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ring/buffer.h"
#include "ring/communicator.h"
#include "ring/halving_doubling_allreduce.h"
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
  // Native-wire buffers from small_bytes up to below this use halving-doubling where the world
  // is a power of two above 2 (the ring's bytes in 2 log2(n) rounds instead of 2(n-1); other
  // sizes would fold, moving more bytes); 0: never. 8 MiB: 4 ranks on this 2-core VM over TCP,
  // unbound, 1 MiB took 0.98-1.31 ms against the ring's 1.72-1.97, 4 MiB 5.5-6.4 against
  // 6.7-7.6; at 16 MiB the ring's pipeline wins (24-27 against 27-29 ms).
  std::int64_t halving_doubling_bytes = 8 << 20;
  // Below this a buffer is bound by message latency alone. A compressed wire uses recursive
  // doubling only there (it sends native values; above, the halved bytes pay), and where ranks
  // share hosts across several hosts only such buffers skip the shared-memory stage.
  static constexpr std::int64_t kLatencyBoundBytes = 64 * 1024;
  // Where several ranks share a host, reduce through shared memory first and run the ring
  // between hosts only on the hosts' sums (HierarchicalAllreduce). A compressed wire applies to
  // those rings only: within a host the sums are exact, and on one host nothing is compressed.
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

  // How many run() calls fell back to fp32 so far on this rank. The flat ring's ranks all agree;
  // under the hierarchical allreduce only the ranks whose ring between hosts overflowed count
  // (the members of that slice's ring, or the leaders), as each ring redoes its own part.
  std::int64_t fallbacks() const { return fallbacks_; }
  const char* algorithm() const;  // "recursive doubling", "halving-doubling", "hierarchical", "ring"
  // Per stream, the bytes each carried and the seconds it took in the last run(), for the
  // StreamBalancer; empty where this buffer's algorithm runs on stream 0 alone, and for the
  // hierarchical one (whose rings between hosts need not run on every rank, nor carry bytes on
  // all of them: the balancer's collective must see the same on every rank).
  const StreamTimings& stream_timings() const;
  const Buffer& buffer() const { return buffer_; }

 private:
  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  AllreduceSpec spec_;
  std::optional<RecursiveDoublingAllreduce> small_;
  std::optional<HalvingDoublingAllreduce> medium_;
  std::optional<HierarchicalAllreduce> hierarchical_;
  std::optional<RingAllreduce> ring_;       // with spec_.wire
  std::optional<RingAllreduce> fallback_;   // fp32 wire, for a compressed ring's overflow
  // Counts a fallback to fp32 (of `which` ring) and warns.
  void note_fallback(std::string_view which);

  std::vector<std::byte> saved_input_;
  std::int64_t fallbacks_ = 0;
};

}  // namespace aiacc::ring
