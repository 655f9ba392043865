// split_by_shard: two passes (count, fill) so every per-shard vector is allocated once.
#include "ps/sharding.h"

namespace aiacc::ps {

ShardSplit split_by_shard(std::span<const std::int64_t> ids, int num_shards) {
  const auto shards = static_cast<std::size_t>(num_shards);
  std::vector<int> shard(ids.size());
  std::vector<std::size_t> counts(shards, 0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    shard[i] = shard_of(ids[i], num_shards);
    ++counts[static_cast<std::size_t>(shard[i])];
  }
  ShardSplit split;
  split.ids.resize(shards);
  split.positions.resize(shards);
  for (std::size_t k = 0; k < shards; ++k) {
    split.ids[k].reserve(counts[k]);
    split.positions[k].reserve(counts[k]);
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto k = static_cast<std::size_t>(shard[i]);
    split.ids[k].push_back(ids[i]);
    split.positions[k].push_back(static_cast<std::int64_t>(i));
  }
  return split;
}

}  // namespace aiacc::ps
