// ShardSampler: per-epoch permutations are deterministic, ranks' shards are disjoint and cover
// the epoch (exactly once without drop_last), and with drop_last every rank has the same
// number of full batches.
#include "data/shard_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"

namespace aiacc::data {
namespace {

ShardOptions shard(std::int64_t size, std::int64_t batch, bool drop_last, int rank, int world) {
  ShardOptions o;
  o.dataset_size = size;
  o.batch_size = batch;
  o.drop_last = drop_last;
  o.seed = 42;
  o.rank = rank;
  o.world_size = world;
  return o;
}

TEST(ShardSampler, PermutationIsDeterministicAndChangesPerEpoch) {
  auto a = ShardSampler::permutation(100, 1, 0);
  EXPECT_EQ(a, ShardSampler::permutation(100, 1, 0));
  EXPECT_NE(a, ShardSampler::permutation(100, 1, 1));
  EXPECT_NE(a, ShardSampler::permutation(100, 2, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_TRUE(ShardSampler::permutation(0, 1, 0).empty());
}

class ShardCoverage : public ::testing::TestWithParam<std::tuple<int, std::int64_t, std::int64_t>> {};

TEST_P(ShardCoverage, WithoutDropLastEveryExampleExactlyOnce) {
  const auto [world, size, batch] = GetParam();
  for (std::int64_t epoch : {0, 1}) {
    std::vector<int> seen(static_cast<std::size_t>(size), 0);
    for (int rank = 0; rank < world; ++rank) {
      ShardSampler sampler(shard(size, batch, false, rank, world));
      auto mine = sampler.epoch_indices(epoch);
      EXPECT_EQ(static_cast<std::int64_t>(mine.size()), sampler.examples_per_epoch());
      EXPECT_EQ(sampler.batches_per_epoch(), (sampler.examples_per_epoch() + batch - 1) / batch);
      for (auto i : mine) ++seen[static_cast<std::size_t>(i)];
    }
    EXPECT_EQ(seen, std::vector<int>(static_cast<std::size_t>(size), 1));
  }
}

TEST_P(ShardCoverage, WithDropLastDisjointAndEqualBatchCounts) {
  const auto [world, size, batch] = GetParam();
  const std::int64_t expected_batches = (size / world) / batch;
  std::set<std::int64_t> seen;
  for (int rank = 0; rank < world; ++rank) {
    ShardSampler sampler(shard(size, batch, true, rank, world));
    EXPECT_EQ(sampler.batches_per_epoch(), expected_batches);
    auto mine = sampler.epoch_indices(3);
    EXPECT_EQ(static_cast<std::int64_t>(mine.size()), expected_batches * batch);
    for (auto i : mine) EXPECT_TRUE(seen.insert(i).second) << "example " << i << " twice";
  }
  // At most W*B - 1 + (N mod W) examples are skipped.
  EXPECT_LE(size - static_cast<std::int64_t>(seen.size()), world * batch - 1 + size % world);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardCoverage,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7),
                                            ::testing::Values<std::int64_t>(0, 2, 10, 11, 12, 100),
                                            ::testing::Values<std::int64_t>(1, 3, 8)));

TEST(ShardSampler, GlobalStepIsAContiguousBlockOfTheOrder) {
  // Step s of all ranks together reads order[s*W*B, (s+1)*W*B): the same examples as one worker
  // with batch W*B.
  const int world = 3;
  const std::int64_t batch = 4, size = 50;
  auto order = ShardSampler::permutation(size, 42, 5);
  std::vector<std::vector<std::int64_t>> per_rank;
  for (int rank = 0; rank < world; ++rank) per_rank.push_back(ShardSampler(shard(size, batch, true, rank, world)).epoch_indices(5));
  for (std::int64_t step = 0; step < 4; ++step) {
    std::vector<std::int64_t> together, expected(order.begin() + step * world * batch,
                                                 order.begin() + (step + 1) * world * batch);
    for (const auto& mine : per_rank) together.insert(together.end(), mine.begin() + step * batch, mine.begin() + (step + 1) * batch);
    std::sort(together.begin(), together.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(together, expected) << "step " << step;
  }
}

TEST(ShardSampler, NoShuffleIsTheIdentityOrder) {
  auto options = shard(10, 2, false, 1, 2);
  options.shuffle = false;
  EXPECT_EQ(ShardSampler(options).epoch_indices(9), (std::vector<std::int64_t>{1, 3, 5, 7, 9}));
}

TEST(ShardSampler, RejectsBadOptions) {
  EXPECT_THROW(ShardSampler(shard(10, 0, true, 0, 1)), InternalError);
  EXPECT_THROW(ShardSampler(shard(10, 1, true, 2, 2)), InternalError);
  EXPECT_THROW(ShardSampler(shard(10, 1, true, 0, 0)), InternalError);
}

}  // namespace
}  // namespace aiacc::data
