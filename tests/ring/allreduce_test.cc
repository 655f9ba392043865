// Allreduce correctness: exact integer sums for world sizes 1-8 (odd ones and buffers smaller
// than the world included), every algorithm and dtype, multi-stream with uneven weights, fp16 and
// bf16 wires within their error bounds and bitwise equal on every rank, the fp32 fallback on
// overflow, and failures that name the peer instead of hanging.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/net/peer_timeout_error.h"
#include "core/util/half.h"
#include "ring/allreduce.h"
#include "ring/detail/element_ops.h"
#include "ring/recursive_doubling_allreduce.h"
#include "ring/ring_allreduce.h"
#include "tests/ring/ring_fixture.h"

namespace aiacc::ring {
namespace {

using testing::expected_sum;
using testing::input_value;
using testing::ring_options;
using testing::run_world;

// The non-finite scan (overflow fallback, the trainer's gradient check): every float type, a
// bad value at the first, a middle and the last position, and the extremes of the finite range.
// An integer average divides the sum by n, truncating: 49 * (1.0 / 49) < 1 made the double
// product truncate 49 / 49 to 0, and i64 sums above 2^53 lost their low bits.
TEST(ElementOps, IntegerAveragesDivideExactly) {
  for (int n : {3, 49, 98}) {
    std::vector<std::int32_t> sums;
    for (std::int32_t k = -200; k <= 200; ++k) sums.push_back(k * n + (k % 5));
    std::vector<std::int32_t> averaged = sums;
    detail::scale(DType::i32, averaged.data(), averaged.size(), 1.0 / n);
    for (std::size_t i = 0; i < sums.size(); ++i) ASSERT_EQ(averaged[i], sums[i] / n) << sums[i] << " / " << n;
  }
  std::vector<std::int64_t> big = {(std::int64_t{1} << 60) + 3 * 7, -((std::int64_t{1} << 58) + 1)};
  const std::vector<std::int64_t> sums = big;
  detail::scale(DType::i64, big.data(), big.size(), 1.0 / 3);
  EXPECT_EQ(big[0], sums[0] / 3);
  EXPECT_EQ(big[1], sums[1] / 3);
}

TEST(ElementOps, NonFiniteIsFoundAnywhereAndFiniteExtremesAreNot) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const double largest = dtype == DType::f16 ? 65504.0 : dtype == DType::bf16 ? 3.3895313892515355e38
                           : dtype == DType::f32 ? 3.4028234663852886e38 : std::numeric_limits<double>::max();
    std::vector<double> values(1000);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = (i % 3 == 0 ? -1.0 : 1.0) * static_cast<double>(i % 17) * 0.25;
    values[5] = largest;
    values[6] = -largest;
    values[7] = 1e-40;  // subnormal in f32, zero where the type has no such value
    Tensor finite = Tensor::from_vector(values, Shape{1000}).to(dtype);
    EXPECT_FALSE(detail::has_non_finite(dtype, finite.raw_data(), 1000)) << dtype_name(dtype);
    EXPECT_FALSE(detail::has_non_finite(dtype, finite.raw_data(), 0)) << dtype_name(dtype);
    for (std::size_t at : {std::size_t{0}, std::size_t{501}, std::size_t{999}}) {
      for (double bad : {inf, -inf, std::nan("")}) {
        std::vector<double> with_bad = values;
        with_bad[at] = bad;
        Tensor t = Tensor::from_vector(with_bad, Shape{1000}).to(dtype);
        EXPECT_TRUE(detail::has_non_finite(dtype, t.raw_data(), 1000)) << dtype_name(dtype) << " " << bad << " at " << at;
        EXPECT_EQ(detail::has_non_finite(dtype, t.raw_data(), at), false) << dtype_name(dtype) << " before " << at;
      }
    }
  }
}

enum class Algorithm { kRing, kRecursiveDoubling, kAuto, kHalvingDoubling };

struct Case {
  int world;
  std::int64_t count;
  int streams;
  Algorithm algorithm;
  const char* transport = "tcp";
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const char* names[] = {"ring", "doubling", "auto", "halving"};
  return fmt::format("w{}_n{}_k{}_{}_{}", info.param.world, info.param.count, info.param.streams,
                     names[static_cast<int>(info.param.algorithm)], info.param.transport);
}

void run_algorithm(Algorithm algorithm, std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec) {
  switch (algorithm) {
    case Algorithm::kRing: RingAllreduce(comm, buffer, spec).run(); break;
    case Algorithm::kRecursiveDoubling: RecursiveDoublingAllreduce(comm, buffer, spec.op).run(); break;
    case Algorithm::kAuto: Allreduce(comm, buffer, spec).run(); break;
    case Algorithm::kHalvingDoubling: HalvingDoublingAllreduce(comm, buffer, spec).run(); break;
  }
}

class AllreduceSum : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceSum, ExactIntegerSumsOnEveryRank) {
  const Case c = GetParam();
  run_world(c.world, ring_options(c.streams, 30.0, c.transport), [&](std::shared_ptr<Communicator> comm) {
    ASSERT_STREQ(comm->transport(), c.transport);
    if (c.streams > 1) comm->set_stream_weights({1.0, 3.0, 2.0});  // uneven split, same on every rank
    std::vector<float> data(static_cast<std::size_t>(c.count));
    for (std::int64_t i = 0; i < c.count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i));
    AllreduceSpec spec;
    spec.chunk_bytes = 4096;  // many chunks per segment: exercises the pipeline
    run_algorithm(c.algorithm, comm, Buffer{data.data(), c.count, DType::f32}, spec);
    for (std::int64_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(data[static_cast<std::size_t>(i)], expected_sum(c.world, i)) << "rank " << comm->rank() << " element " << i;
    }
  });
}

std::vector<Case> sum_cases() {
  std::vector<Case> cases;
  for (int world = 1; world <= 8; ++world) {
    for (std::int64_t count : {std::int64_t{1}, std::int64_t{5}, std::int64_t{1000}, std::int64_t{40009}}) {
      cases.push_back({world, count, 1, Algorithm::kRing});
      cases.push_back({world, count, 1, Algorithm::kRecursiveDoubling});
      cases.push_back({world, count, 1, Algorithm::kHalvingDoubling});
    }
  }
  for (int world : {2, 3, 5}) {
    cases.push_back({world, 2, 3, Algorithm::kRing});        // fewer elements than streams
    cases.push_back({world, 100003, 3, Algorithm::kRing});
    cases.push_back({world, 100003, 3, Algorithm::kAuto});
    cases.push_back({world, 100, 3, Algorithm::kAuto});
    cases.push_back({world, 2, 3, Algorithm::kHalvingDoubling});
    cases.push_back({world, 100003, 3, Algorithm::kHalvingDoubling});
  }
  for (int world : {4, 8}) cases.push_back({world, 100003, 3, Algorithm::kHalvingDoubling});
  // The ZeroMQ channels (the transport under CURVE) run the same algorithms.
  for (int world : {2, 3, 5}) {
    cases.push_back({world, 40009, 1, Algorithm::kRing, "zmq"});
    cases.push_back({world, 1000, 1, Algorithm::kRecursiveDoubling, "zmq"});
    cases.push_back({world, 40009, 1, Algorithm::kHalvingDoubling, "zmq"});
    cases.push_back({world, 100003, 3, Algorithm::kAuto, "zmq"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllreduceSum, ::testing::ValuesIn(sum_cases()), case_name);

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bf16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return to_float(v);
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
void check_dtype(Algorithm algorithm) {
  constexpr int kWorld = 3;
  constexpr std::int64_t kCount = 2000;
  run_world(kWorld, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    std::vector<T> data(kCount);
    for (std::int64_t i = 0; i < kCount; ++i) data[static_cast<std::size_t>(i)] = from_double<T>(input_value(comm->rank(), i));
    AllreduceSpec spec;
    spec.chunk_bytes = 1000;
    run_algorithm(algorithm, comm, Buffer{data.data(), kCount, dtype_of<T>()}, spec);
    for (std::int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(to_double(data[static_cast<std::size_t>(i)]), expected_sum(kWorld, i)) << dtype_name(dtype_of<T>()) << " element " << i;
    }
  });
}

TEST(AllreduceDtypes, EveryReducibleTypeSumsExactly) {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kHalvingDoubling}) {
    check_dtype<double>(algorithm);
    check_dtype<std::int32_t>(algorithm);
    check_dtype<std::int64_t>(algorithm);
    check_dtype<Half>(algorithm);
    check_dtype<BFloat16>(algorithm);
  }
}

TEST(AllreduceDtypes, UnsupportedTypeOrWireIsAConfigError) {
  run_world(1, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    std::vector<std::uint8_t> bytes(8);
    EXPECT_THROW(Allreduce(comm, Buffer{bytes.data(), 8, DType::u8}, {}), ConfigError);
    std::vector<double> doubles(8);
    AllreduceSpec spec;
    spec.wire = WireType::kF16;
    EXPECT_THROW(Allreduce(comm, Buffer{doubles.data(), 8, DType::f64}, spec), ConfigError);
  });
}

// Ranks on separate hosts: recursive doubling below small_bytes (native wire), the ring from
// there on; a compressed wire takes the ring from kLatencyBoundBytes, so its halved bytes pay.
TEST(AllreduceChoice, RecursiveDoublingBelowSmallBytesRingAbove) {
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 1});
    const AllreduceTuning tuning;
    const std::int64_t below = tuning.small_bytes / 4 - 1, at = tuning.small_bytes / 4;
    std::vector<float> data(static_cast<std::size_t>(at), 1.0f);
    EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), below, DType::f32}, {}).algorithm(), "recursive doubling");
    EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), at, DType::f32}, {}).algorithm(), "ring");
    AllreduceSpec fp16;
    fp16.wire = WireType::kF16;
    const std::int64_t compressed_limit = AllreduceTuning::kLatencyBoundBytes / 4;
    EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), compressed_limit - 1, DType::f32}, fp16).algorithm(),
                 "recursive doubling");
    EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), compressed_limit, DType::f32}, fp16).algorithm(), "ring");
  });
}

// Between small_bytes and halving_doubling_bytes, a power-of-two world of more than two ranks
// takes halving-doubling; two ranks (where it is the ring's two messages) and other world sizes
// (where folding moves more bytes) keep the ring.
TEST(AllreduceChoice, HalvingDoublingBetweenItsBoundsOnMoreThanTwoRanks) {
  for (int world : {2, 3, 4}) {
    run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
      std::vector<int> hosts(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) hosts[static_cast<std::size_t>(r)] = r;
      comm->set_hosts(hosts);
      AllreduceTuning tuning;
      tuning.halving_doubling_bytes = 4 * tuning.small_bytes;
      const std::int64_t first = tuning.small_bytes / 4, last = tuning.halving_doubling_bytes / 4 - 1;
      std::vector<float> data(static_cast<std::size_t>(last + 1), 1.0f);
      const char* expected = world == 4 ? "halving-doubling" : "ring";
      EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), first - 1, DType::f32}, {}, tuning).algorithm(), "recursive doubling");
      EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), first, DType::f32}, {}, tuning).algorithm(), expected);
      EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), last, DType::f32}, {}, tuning).algorithm(), expected);
      EXPECT_STREQ(Allreduce(comm, Buffer{data.data(), last + 1, DType::f32}, {}, tuning).algorithm(), "ring");
    });
  }
}

// Through Allreduce (halving-doubling, then the ring): exact sums, and the StreamBalancer's
// input: every multi-stream algorithm reports each stream's bytes (which cover the buffer) and
// seconds; recursive doubling, on stream 0 alone, reports none.
TEST(AllreduceChoice, MultiStreamAlgorithmsReportEachStreamsTimings) {
  run_world(4, ring_options(3), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 1, 2, 3});
    comm->set_stream_weights({1.0, 3.0, 2.0});
    AllreduceTuning tuning;
    std::vector<float> data(static_cast<std::size_t>(tuning.halving_doubling_bytes / 4), 1.0f);
    for (const std::int64_t count : {tuning.small_bytes / 4, tuning.halving_doubling_bytes / 4}) {
      for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i));
      Allreduce allreduce(comm, Buffer{data.data(), count, DType::f32}, {}, tuning);
      allreduce.run();
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(data[static_cast<std::size_t>(i)], expected_sum(4, i)) << allreduce.algorithm() << " element " << i;
      }
      const StreamTimings& timings = allreduce.stream_timings();
      ASSERT_EQ(timings.bytes.size(), 3u) << allreduce.algorithm();
      ASSERT_EQ(timings.seconds.size(), 3u) << allreduce.algorithm();
      EXPECT_EQ(timings.bytes[0] + timings.bytes[1] + timings.bytes[2], count * 4) << allreduce.algorithm();
      EXPECT_GT(timings.bytes[1], timings.bytes[0]) << allreduce.algorithm();
      for (double seconds : timings.seconds) EXPECT_GT(seconds, 0.0) << allreduce.algorithm();
    }
    Allreduce small(comm, Buffer{data.data(), 1000, DType::f32}, {}, tuning);
    small.run();
    EXPECT_STREQ(small.algorithm(), "recursive doubling");
    EXPECT_TRUE(small.stream_timings().bytes.empty());
  });
}

// Sums of non-integers depend on the order of additions: one rank finalises each element and
// the others copy it, so every rank ends with the same bits.
TEST(AllreduceHalvingDoubling, EveryRankEndsBitwiseEqual) {
  for (int world : {3, 4, 6, 8}) {
    std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
    run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
      std::vector<float> data(10007);
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + comm->rank()));
      AllreduceSpec spec;
      spec.op = ReduceOp::kAverage;
      spec.chunk_bytes = 1000;
      HalvingDoublingAllreduce(comm, Buffer{data.data(), 10007, DType::f32}, spec).run();
      results[static_cast<std::size_t>(comm->rank())] = data;
    });
    for (int r = 1; r < world; ++r) {
      ASSERT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(), results[0].size() * sizeof(float)), 0)
          << "world " << world << " rank " << r;
    }
    double worst = 0;
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      double exact = 0;
      for (int r = 0; r < world; ++r) exact += static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r));
      worst = std::max(worst, std::abs(results[0][i] - exact / world));
    }
    EXPECT_LT(worst, 1e-6) << "world " << world;
  }
}

// On ZeroMQ links with small high-water marks (2 + 2 messages) and kernel buffers (4 KiB),
// posting a run of 1 KiB chunks as long as a ring's first segment or a halving-doubling half
// (~80 of them) blocked every rank's posts until the timeout (found in review with the default
// marks and ~2400 chunks); the chunks now grow to fit the queues, and the sums are exact.
TEST(AllreduceZmqQueues, RunsOfChunksFitTheHighWaterMarks) {
  for (const auto& [world, ring] : std::vector<std::pair<int, bool>>{{2, true}, {3, true}, {4, false}}) {
    auto options = ring_options(1, 5.0, "zmq");
    options.channel.send_hwm = 2;
    options.channel.recv_hwm = 2;
    options.channel.send_buffer_bytes = 4096;
    options.channel.recv_buffer_bytes = 4096;
    run_world(world, options, [&, world = world, ring = ring](std::shared_ptr<Communicator> comm) {
      const std::int64_t count = 40000 * world;
      std::vector<float> data(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i));
      AllreduceSpec spec;
      spec.chunk_bytes = 1024;
      const Buffer buffer{data.data(), count, DType::f32};
      if (ring) {
        RingAllreduce(comm, buffer, spec).run();
      } else {
        HalvingDoublingAllreduce(comm, buffer, spec).run();
      }
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(data[static_cast<std::size_t>(i)], static_cast<float>(expected_sum(world, i)))
            << "world " << world << (ring ? " ring" : " halving-doubling") << ", element " << i;
      }
    });
  }
}

TEST(AllreduceAverage, EqualsSumOverWorld) {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kHalvingDoubling}) {
    run_world(4, ring_options(2), [&](std::shared_ptr<Communicator> comm) {
      std::vector<float> data(5000);
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(input_value(comm->rank(), static_cast<std::int64_t>(i)));
      AllreduceSpec spec;
      spec.op = ReduceOp::kAverage;
      run_algorithm(algorithm, comm, Buffer{data.data(), 5000, DType::f32}, spec);
      for (std::size_t i = 0; i < data.size(); ++i) {
        ASSERT_EQ(data[i], static_cast<float>(expected_sum(4, static_cast<std::int64_t>(i))) * 0.25f);
      }
    });
  }
}

// fp16 / bf16 wire: each hop rounds a partial sum once, so the error of an element is at most
// (n - 1) roundings of partial sums plus the final one, each <= half an ulp of |partial| <=
// sum of |inputs|: |err| <= n * eps/2 * sum_r |x_r| with eps = 2^-10 (fp16) or 2^-7 (bf16).
void check_compressed(WireType wire, double eps, ReduceOp op) {
  constexpr int kWorld = 5;
  constexpr std::int64_t kCount = 300001;
  const auto results = testing::run_compressed(kWorld, {}, wire, op, kCount);
  testing::expect_within_wire_bound(results, op == ReduceOp::kAverage ? kWorld : 1, kWorld * eps / 2, wire_type_name(wire));
}

TEST(AllreduceCompressedWire, Fp16WithinBoundAndBitwiseEqualOnEveryRank) {
  check_compressed(WireType::kF16, std::ldexp(1.0, -10), ReduceOp::kSum);
  check_compressed(WireType::kF16, std::ldexp(1.0, -10), ReduceOp::kAverage);
}

TEST(AllreduceCompressedWire, Bf16WithinBound) { check_compressed(WireType::kBf16, std::ldexp(1.0, -7), ReduceOp::kSum); }

TEST(AllreduceCompressedWire, OverflowFallsBackToFp32OnEveryRank) {
  constexpr int kWorld = 3;
  constexpr std::int64_t kCount = 100000;
  run_world(kWorld, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    std::vector<float> data(kCount, 1.5f);
    data[777] = 40000.0f;  // 3 x 40000 > 65504: the fp16 partial sums overflow
    AllreduceSpec spec;
    spec.wire = WireType::kF16;
    Allreduce allreduce(comm, Buffer{data.data(), kCount, DType::f32}, spec);
    EXPECT_TRUE(allreduce.run());
    EXPECT_EQ(allreduce.fallbacks(), 1);
    EXPECT_EQ(data[777], 120000.0f);
    EXPECT_EQ(data[0], 4.5f);
    // Pre-scaling keeps the average representable: no fallback.
    std::vector<float> again(kCount, 1.5f);
    again[777] = 40000.0f;
    spec.op = ReduceOp::kAverage;
    Allreduce average(comm, Buffer{again.data(), kCount, DType::f32}, spec);
    EXPECT_FALSE(average.run());
    EXPECT_NEAR(again[777], 40000.0f, 40000.0f * 3 * std::ldexp(1.0, -11));
  });
}

TEST(AllreduceMismatch, SizeMismatchIsReportedNotHung) {
  EXPECT_THROW(
      run_world(2, ring_options(1, 5.0), [&](std::shared_ptr<Communicator> comm) {
        std::vector<float> data(comm->rank() == 0 ? 100000 : 100001, 1.0f);
        RingAllreduce(comm, Buffer{data.data(), static_cast<std::int64_t>(data.size()), DType::f32}, {}).run();
      }),
      CommError);
}

// Errors name a stream as the user configured it (cluster.ring.streams: 0 .. K-1) with its
// direction: with 2 streams, rank 0's messages from rank 1 on stream 1 travel on the mesh's
// stream 3, which no user knows of.
TEST(AllreduceMismatch, ErrorsNameTheConfiguredStreamAndTheDirection) {
  std::vector<std::string> errors(2);
  run_world(2, ring_options(2, 5.0), [&](std::shared_ptr<Communicator> comm) {
    const int peer = 1 - comm->rank();
    std::vector<std::byte> bytes(8);
    if (comm->rank() == 1) {
      comm->to(peer, 1).send(std::span<const std::byte>(bytes.data(), 4), net::deadline_after(5), "a short message");
      return;
    }
    try {
      comm->from(peer, 1).recv_into(bytes, net::deadline_after(5), "an 8-byte message");
    } catch (const CommError& e) {
      errors[0] = e.what();
    }
    try {
      comm->from(peer, 0).recv(net::deadline_after(0.2), "a message never sent");
    } catch (const CommError& e) {
      errors[1] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 1 sent 4 bytes (ring stream 1, from rank 1 to this rank), expected 8"),
            std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("recv from rank 1 (ring stream 0, from rank 1 to this rank;"), std::string::npos)
      << errors[1];
}

// Failures on either transport.
class AllreduceFailures : public ::testing::TestWithParam<const char*> {};

TEST_P(AllreduceFailures, SilentPeerTimesOutNamingIt) {
  // Rank 2 is alive but never joins: its right neighbour (rank 0) waits on it and must say so
  // (in the error's text and as the PeerTimeoutError's peer); every rank must fail with a
  // timeout instead of hanging.
  std::vector<std::string> errors(3);
  std::vector<int> peers(3, -1);
  run_world(3, ring_options(1, 1.0, GetParam()), [&](std::shared_ptr<Communicator> comm) {
    std::vector<float> data(100000, 1.0f);
    if (comm->rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    try {
      RingAllreduce(comm, Buffer{data.data(), 100000, DType::f32}, {}).run();
    } catch (const net::PeerTimeoutError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
      peers[static_cast<std::size_t>(comm->rank())] = e.peer();
    } catch (const CommError& e) {
      // Rank 1 may see rank 0 give up (a disconnect) before its own deadline.
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
  EXPECT_EQ(peers[0], 2) << errors[0];
  // The ring's stream as configured (0 of 1) and the direction, not the mesh's index (1: the
  // higher rank's direction).
  EXPECT_NE(errors[0].find("recv from rank 2 (ring stream 0, from rank 2 to this rank;"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("ring allreduce reduce-scatter"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty()) << "rank 1 should time out too";
}

TEST_P(AllreduceFailures, DeadPeerIsACommErrorNamingIt) {
  try {
    run_world(2, ring_options(1, 20.0, GetParam()), [&](std::shared_ptr<Communicator> comm) {
      std::vector<float> data(100000, 1.0f);
      if (comm->rank() == 1) return;  // its communicator (and sockets) close now
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      RingAllreduce(comm, Buffer{data.data(), 100000, DType::f32}, {}).run();
    });
    FAIL() << "expected a failure";
  } catch (const TimeoutError& e) {
    FAIL() << "a dead peer should be reported at once, not at the deadline: " << e.what();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST_P(AllreduceFailures, HalvingDoublingSilentPartnerTimesOutNamingIt) {
  // Rank 1 never joins: rank 0, which meets it in the second halving round (after swapping with
  // rank 2), must name it and the round; rank 3 (its first partner) and rank 2 fail too, at
  // their deadline or when a peer quits.
  std::vector<std::string> errors(4);
  run_world(4, ring_options(1, 1.0, GetParam()), [&](std::shared_ptr<Communicator> comm) {
    std::vector<float> data(100000, 1.0f);
    if (comm->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    try {
      HalvingDoublingAllreduce(comm, Buffer{data.data(), 100000, DType::f32}, {}).run();
    } catch (const CommError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("halving-doubling allreduce reduce-scatter"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[2].empty()) << "rank 2 should fail too";
  EXPECT_FALSE(errors[3].empty()) << "rank 3 should fail too";
}

INSTANTIATE_TEST_SUITE_P(Transports, AllreduceFailures, ::testing::Values("tcp", "zmq"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace aiacc::ring
