// Which examples a rank reads in an epoch: one permutation per (seed, epoch), identical on every
// rank, dealt out round-robin so the ranks' shards are disjoint, cut into batches.
#pragma once

#include <cstdint>
#include <vector>

namespace aiacc::data {

struct ShardOptions {
  std::int64_t dataset_size = 0;
  std::int64_t batch_size = 1;   // per rank
  bool shuffle = true;           // false: the identity order every epoch
  bool drop_last = true;         // see ShardSampler
  std::uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

// Rank r takes positions r, r + W, r + 2W, ... of the epoch's order (W = world_size). Why
// round-robin rather than contiguous slices: step s of all ranks together then covers the
// contiguous block [s*W*B, (s+1)*W*B) of the order, exactly the batch of one worker with batch
// size W*B, so results do not depend on how the same global batch is split.
//
// drop_last: every rank gets floor(floor(N/W) / B) full batches (equal on all ranks, so the
// ranks agree on the number of steps); at most W*B - 1 + (N mod W) examples are skipped.
// Without drop_last every example is read once per epoch across ranks, the last batch may be
// short, and ranks may differ by one batch (fine for evaluation with metrics summed at the end).
// Immutable after construction; thread-safe.
class ShardSampler {
 public:
  // Throws InternalError unless batch_size >= 1, world_size >= 1, 0 <= rank < world_size and
  // dataset_size >= 0.
  explicit ShardSampler(const ShardOptions& options);

  std::int64_t batches_per_epoch() const { return batches_; }
  std::int64_t examples_per_epoch() const { return examples_; }  // this rank

  // This rank's example indices of `epoch` in reading order (examples_per_epoch() of them);
  // batch b is [b*B, min((b+1)*B, size)). O(dataset_size) time and memory.
  std::vector<std::int64_t> epoch_indices(std::int64_t epoch) const;

  // The order of all examples in `epoch`: a Fisher-Yates shuffle driven by Rng(seed, epoch).
  static std::vector<std::int64_t> permutation(std::int64_t size, std::uint64_t seed, std::int64_t epoch);

 private:
  ShardOptions options_;
  std::int64_t examples_ = 0;
  std::int64_t batches_ = 0;
};

}  // namespace aiacc::data
