// Which parameter-server shard owns an id, and the split of a request's ids by shard.
// The shard hash is salted differently from LocalEmbeddingStore's partition hash, so the ids of
// one shard still spread evenly over that shard's partitions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/util/random.h"

namespace aiacc::ps {

// Shard of `id` among `num_shards` (>= 1): multiply-shift on a 64-bit mix of the id, uniform
// for any count. Every process computes the same mapping.
inline int shard_of(std::int64_t id, int num_shards) {
  const std::uint64_t hash = mix64(static_cast<std::uint64_t>(id) ^ 0x2545f4914f6cdd1dull);
  return static_cast<int>(((hash >> 32) * static_cast<std::uint64_t>(num_shards)) >> 32);
}

// A request's ids grouped by shard. ids[k] are the ids for shard k in request order and
// positions[k][j] is the index in the request of ids[k][j].
struct ShardSplit {
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::vector<std::int64_t>> positions;
};

// Splits `ids` over `num_shards` shards (a counting pass, then one fill pass).
ShardSplit split_by_shard(std::span<const std::int64_t> ids, int num_shards);

}  // namespace aiacc::ps
