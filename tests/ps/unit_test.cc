// ps units without networking: the shard hash (deterministic, even, independent of the store's
// partition hash), split_by_shard, RequestLog (a repeat is detected; memory stays bounded),
// header (de)serialisation and its validation, table configs as YAML.
#include <gtest/gtest.h>

#include <cstring>

#include "core/embedding/local_embedding_store.h"
#include "core/error.h"
#include "ps/protocol.h"
#include "ps/request_log.h"
#include "ps/sharding.h"

namespace aiacc::ps {
namespace {

TEST(Sharding, EvenAndIndependentOfStorePartitions) {
  constexpr int kShards = 5;
  constexpr int kIds = 200000;
  std::vector<int> per_shard(kShards, 0);
  std::vector<int> partitions_of_shard0(16, 0);
  for (std::int64_t id = 0; id < kIds; ++id) {
    const int shard = shard_of(id, kShards);
    ASSERT_GE(shard, 0);
    ASSERT_LT(shard, kShards);
    ++per_shard[shard];
    if (shard == 0) ++partitions_of_shard0[LocalEmbeddingStore::partition_of(id, 16)];
  }
  for (int n : per_shard) EXPECT_NEAR(n, kIds / kShards, kIds / kShards * 0.03);
  // The ids of one shard still fill all of its partitions evenly.
  for (int n : partitions_of_shard0) EXPECT_NEAR(n, per_shard[0] / 16, per_shard[0] / 16 * 0.15);
  EXPECT_EQ(shard_of(-123456789, 7), shard_of(-123456789, 7));
  EXPECT_EQ(shard_of(42, 1), 0);
}

TEST(Sharding, SplitKeepsRequestOrderAndPositions) {
  const std::vector<std::int64_t> ids{10, 11, 12, 13, 14, 15, 16, 17};
  const ShardSplit split = split_by_shard(ids, 3);
  std::size_t total = 0;
  for (int k = 0; k < 3; ++k) {
    for (std::size_t j = 0; j < split.ids[k].size(); ++j) {
      EXPECT_EQ(split.ids[k][j], ids[split.positions[k][j]]);
      EXPECT_EQ(shard_of(split.ids[k][j], 3), k);
      if (j > 0) {
        EXPECT_LT(split.positions[k][j - 1], split.positions[k][j]);
      }
    }
    total += split.ids[k].size();
  }
  EXPECT_EQ(total, ids.size());
  EXPECT_TRUE(split_by_shard({}, 2).ids[1].empty());
}

TEST(RequestLog, RepeatsAreDetectedAndMemoryStaysBounded) {
  RequestLog log;
  EXPECT_TRUE(log.record(0, 7, 1));
  EXPECT_TRUE(log.record(0, 7, 3));
  EXPECT_FALSE(log.record(0, 7, 3));
  EXPECT_TRUE(log.record(0, 7, 2));
  EXPECT_FALSE(log.record(0, 7, 1));
  EXPECT_EQ(log.tracked(), 0u);  // 1..3 contiguous: folded into the floor
  EXPECT_TRUE(log.record(1, 9, 1));  // another worker has its own numbering
  EXPECT_TRUE(log.record(0, 8, 1));  // a new session (restarted client) starts afresh
  for (std::uint64_t s = 2; s < 10000; ++s) EXPECT_TRUE(log.record(0, 8, s));
  EXPECT_EQ(log.tracked(), 0u);
  // A seq that never comes (10000) holds the floor only until kMaxTracked seqs wait above it.
  for (std::uint64_t s = 10001; s < 10001 + 3 * RequestLog::kMaxTracked; ++s) EXPECT_TRUE(log.record(0, 8, s));
  EXPECT_LE(log.tracked(), RequestLog::kMaxTracked);
  EXPECT_FALSE(log.record(0, 8, 10001 + RequestLog::kMaxTracked));  // repeats are still repeats
  // The skipped one arriving late (a retry after a lost frame) is new once, then a repeat.
  EXPECT_TRUE(log.record(0, 8, 10000));
  EXPECT_FALSE(log.record(0, 8, 10000));
  // A wider gap (20000..20009 never sent) skipped, then its seqs arriving out of order.
  RequestLog wide;
  for (std::uint64_t s = 1; s < 20000; ++s) wide.record(0, 1, s);
  for (std::uint64_t s = 20010; s < 20010 + RequestLog::kMaxTracked + 1; ++s) EXPECT_TRUE(wide.record(0, 1, s));
  for (std::uint64_t s : {20005u, 20000u, 20009u, 20003u, 20001u, 20002u, 20004u, 20006u, 20008u, 20007u}) {
    EXPECT_TRUE(wide.record(0, 1, s)) << s;
    EXPECT_FALSE(wide.record(0, 1, s)) << s;
  }
  EXPECT_FALSE(wide.record(0, 1, 19999));
}

TEST(Protocol, HeadersRoundTripAndForeignBytesAreRejected) {
  RequestHeader h;
  h.op = Op::push;
  h.worker = 3;
  h.step = 99;
  h.seq = 1234;
  h.count = 5;
  h.dim = 16;
  h.lr = 0.25;
  const auto bytes = header_bytes(h);
  const RequestHeader back = decode_request_header(bytes, "test");
  EXPECT_EQ(back.op, Op::push);
  EXPECT_EQ(back.step, 99u);
  EXPECT_EQ(back.lr, 0.25);
  std::vector<std::byte> bad(bytes.begin(), bytes.end());
  bad[0] = std::byte{0};
  EXPECT_THROW(decode_request_header(bad, "test"), CommError);
  EXPECT_THROW(decode_request_header(std::span(bad).first(10), "test"), CommError);
  std::vector<std::byte> bad_op(bytes.begin(), bytes.end());
  const std::uint16_t op = 99;
  std::memcpy(bad_op.data() + 6, &op, sizeof op);
  try {
    decode_request_header(bad_op, "worker 3");
    FAIL();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 3"), std::string::npos);
  }
}

TEST(Protocol, TableConfigRoundTripsThroughYaml) {
  TableConfig c;
  c.spec.name = "deep.C7";
  c.spec.dim = 16;
  c.spec.init_scale = 0.01;
  c.spec.seed = 0xfedcba9876543210ull;
  c.optimizer.type = "ftrl";
  c.optimizer.lr = 0.3;
  c.optimizer.l1 = 1e-3;
  c.options.consistency = "bounded";
  c.options.staleness = 3;
  c.options.num_workers = 4;
  const std::string yaml = encode_table_config(c);
  const TableConfig back = decode_table_config(yaml, "test");
  EXPECT_EQ(back.spec.name, "deep.C7");
  EXPECT_EQ(back.spec.seed, c.spec.seed);
  EXPECT_EQ(back.optimizer.l1, 1e-3);
  EXPECT_EQ(back.options.staleness, 3);
  EXPECT_EQ(encode_table_config(back), yaml);
  EXPECT_THROW(decode_table_config("name: x\ndim: 4\ntable: {consistency: eventual}\n", "t"),
               ConfigError);
  EXPECT_NE(table_key("a"), table_key("b"));
}

}  // namespace
}  // namespace aiacc::ps
