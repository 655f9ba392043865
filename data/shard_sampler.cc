// Deterministic epoch orders and per-rank shards.
#include "data/shard_sampler.h"

#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/util/random.h"

namespace aiacc::data {

ShardSampler::ShardSampler(const ShardOptions& options) : options_(options) {
  AIACC_CHECK_GE(options.batch_size, 1);
  AIACC_CHECK_GE(options.world_size, 1);
  AIACC_CHECK(options.rank >= 0 && options.rank < options.world_size, "rank {} of world size {}",
              options.rank, options.world_size);
  AIACC_CHECK_GE(options.dataset_size, 0);
  const std::int64_t n = options.dataset_size, w = options.world_size, b = options.batch_size;
  if (options.drop_last) {
    batches_ = (n / w) / b;
    examples_ = batches_ * b;
  } else {
    examples_ = n > options.rank ? (n - options.rank + w - 1) / w : 0;
    batches_ = (examples_ + b - 1) / b;
  }
}

std::vector<std::int64_t> ShardSampler::permutation(std::int64_t size, std::uint64_t seed,
                                                    std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  // The epoch is the Rng stream: every rank derives the same order without communicating.
  Rng rng(seed, static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = size - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

std::vector<std::int64_t> ShardSampler::epoch_indices(std::int64_t epoch) const {
  std::vector<std::int64_t> order;
  if (options_.shuffle) {
    order = permutation(options_.dataset_size, options_.seed, epoch);
  } else {
    order.resize(static_cast<std::size_t>(options_.dataset_size));
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(examples_));
  for (std::int64_t k = 0; k < examples_; ++k) {
    mine.push_back(order[static_cast<std::size_t>(options_.rank + k * options_.world_size)]);
  }
  return mine;
}

}  // namespace aiacc::data
