// Hierarchical allreduce (shared memory within a host, rings between hosts): exact sums
// equal to the flat ring for emulated host layouts, averages, the facade's choice, and a silent
// local rank reported by name instead of hanging. The single-host all-gather of byte messages:
// exact messages of any size in rank order, views that survive peers running ahead, growth.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/allreduce.h"
#include "ring/hierarchical_allreduce.h"
#include "ring/detail/host_segment.h"
#include "ring/host_allgather.h"
#include "tests/ring/ring_fixture.h"

namespace aiacc::ring {
namespace {

using testing::expected_sum;
using testing::input_value;
using testing::ring_options;
using testing::run_world;

struct Layout {
  std::vector<int> hosts;  // host of each rank
  // Several hosts, each with as many ranks (more than one): the sliced path's layouts.
  bool even() const {
    std::map<int, int> ranks;
    for (int h : hosts) ++ranks[h];
    if (ranks.size() < 2 || ranks.begin()->second < 2) return false;
    return std::all_of(ranks.begin(), ranks.end(), [&](const auto& e) { return e.second == ranks.begin()->second; });
  }
};

class Hierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(Hierarchical, ExactSumsEqualTheFlatRing) {
  const auto hosts = GetParam().hosts;
  const int world = static_cast<int>(hosts.size());
  // On one host, small chunks take the direct path (every rank sums all slots); 192 KiB chunks
  // split the large buffer into three for the scattered path; 1 MiB chunks hold it whole.
  for (std::int64_t chunk_bytes : {std::int64_t{8192}, std::int64_t{192} << 10, std::int64_t{1} << 20})
  for (std::int64_t count : {std::int64_t{1}, std::int64_t{7}, std::int64_t{100003}}) {
    run_world(world, ring_options(2), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(hosts);
      std::vector<float> data(static_cast<std::size_t>(count)), flat(data.size());
      for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i));
      flat = data;
      AllreduceSpec spec;
      spec.chunk_bytes = chunk_bytes;
      HierarchicalAllreduce hierarchical(comm, Buffer{data.data(), count, DType::f32}, spec);
      if (hierarchical.path() == HierarchicalAllreduce::HostPath::across_hosts ||
          hierarchical.path() == HierarchicalAllreduce::HostPath::across_hosts_sliced) {
        EXPECT_EQ(hierarchical.path() == HierarchicalAllreduce::HostPath::across_hosts_sliced, GetParam().even())
            << "rank " << comm->rank();
      }
      for (int repeat = 0; repeat < 2; ++repeat) {
        if (repeat == 1) {
          for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i));
        }
        hierarchical.run();
        for (std::int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[static_cast<std::size_t>(i)], expected_sum(world, i)) << "rank " << comm->rank() << " element " << i;
        }
      }
      RingAllreduce(comm, Buffer{flat.data(), count, DType::f32}, spec).run();
      ASSERT_EQ(data, flat);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical,
                         ::testing::Values(Layout{{0, 0}}, Layout{{0, 0, 0, 0}}, Layout{{0, 0, 0, 1, 1, 2}},
                                           Layout{{0, 1, 0, 1, 0}}, Layout{{0, 1, 2}}, Layout{{0, 0, 1, 1}},
                                           Layout{{0, 1, 1, 0}}, Layout{{0, 0, 0, 1, 1, 1}},
                                           Layout{{2, 1, 0, 2, 1, 0}}));

cpu_set_t cpu_mask(std::initializer_list<int> cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : cpus) CPU_SET(c, &mask);
  return mask;
}

TEST(HostSegmentBarrier, RanksOutnumberCpusUnderAnyPinning) {
  using detail::ranks_outnumber_cpus;
  const cpu_set_t c0 = cpu_mask({0}), c1 = cpu_mask({1}), all4 = cpu_mask({0, 1, 2, 3}), c01 = cpu_mask({0, 1});
  EXPECT_FALSE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c0, c1}));
  EXPECT_TRUE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c0, c0}));
  EXPECT_FALSE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c0, all4}));
  EXPECT_TRUE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c0, c0, all4}));   // the union alone has room
  EXPECT_TRUE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c01, c01, c01, all4}));
  EXPECT_FALSE(ranks_outnumber_cpus(std::vector<cpu_set_t>{c01, c01, all4, all4}));
  EXPECT_TRUE(ranks_outnumber_cpus(std::vector<cpu_set_t>{all4, all4, all4, all4, all4}));
}

// The barrier yields the core only where the local ranks outnumber the CPUs they may use
// together: two ranks pinned to one CPU do (one must run for the other to arrive), two ranks on
// two CPUs do not. Ranks here are threads; each pins itself before the segment reads its mask.
TEST(HostSegmentBarrier, OversubscribedWhenRanksShareTheirOnlyCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  ASSERT_FALSE(cpus.empty());
  bool can_pin = false;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    can_pin = sched_setaffinity(0, sizeof one, &one) == 0;
  }).join();
  if (!can_pin) GTEST_SKIP() << "this sandbox refuses sched_setaffinity";
  struct Case {
    std::vector<int> cpu_of_rank;  // -1: all allowed CPUs
    bool oversubscribed;
  };
  std::vector<Case> cases = {{{cpus[0], cpus[0]}, true}};
  if (cpus.size() >= 2) {
    cases.push_back({{cpus[0], cpus[1]}, false});
    cases.push_back({{cpus[0], -1}, false});  // one pinned, one free to use the other CPU
  }
  // Two on one core beside an unpinned third: the union of the masks is large enough, the two
  // pinned ranks still share a core (with 2 CPUs the union alone already says so).
  if (cpus.size() >= 3) cases.push_back({{cpus[0], cpus[0], -1}, true});
  for (const Case& c : cases) {
    const int world = static_cast<int>(c.cpu_of_rank.size());
    std::vector<int> local(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) local[static_cast<std::size_t>(r)] = r;
    // Ranks are fresh threads, so pinning one changes nothing outside this test.
    run_world(world, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
      const int cpu = c.cpu_of_rank[static_cast<std::size_t>(comm->rank())];
      if (cpu >= 0) {
        cpu_set_t mine;
        CPU_ZERO(&mine);
        CPU_SET(cpu, &mine);
        ASSERT_EQ(sched_setaffinity(0, sizeof mine, &mine), 0);  // this thread only
      }
      detail::HostSegment segment(*comm, local, 64, 7, "test segment");
      EXPECT_TRUE(segment.oversubscribed()) << "assumed before the first barrier";
      segment.wait_all(1, "first", comm->deadline());
      EXPECT_EQ(segment.oversubscribed(), c.oversubscribed) << "rank " << comm->rank();
      segment.wait_all(2, "second", comm->deadline());
    });
  }
}

// The sliced path between hosts: many runs back to back with drifting ranks (two hosts of two,
// one host's ranks interleaved with the other's), so a rank starts the next run while peers
// still copy out the last one. Inputs of quarters keep sums and averages exact. Every rank
// ends with the same bits.
TEST(HierarchicalSliced, BackToBackRunsSumAndAverageExactly) {
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{1, 0, 0, 1}}) {
    std::vector<std::vector<double>> last(4);
    run_world(4, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(hosts);
      constexpr std::int64_t kCount = 10001;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<double> data(kCount);
        AllreduceSpec spec;
        spec.op = op;
        HierarchicalAllreduce allreduce(comm, Buffer{data.data(), kCount, DType::f64}, spec);
        ASSERT_EQ(allreduce.path(), HierarchicalAllreduce::HostPath::across_hosts_sliced);
        std::uint64_t pause = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(comm->rank() + 1);
        for (int run = 0; run < 40; ++run) {
          for (std::int64_t i = 0; i < kCount; ++i) data[static_cast<std::size_t>(i)] = input_value(comm->rank(), i) + 0.25 * run;
          pause = pause * 6364136223846793005ull + 1442695040888963407ull;
          if ((pause >> 60) < 4) std::this_thread::sleep_for(std::chrono::microseconds((pause >> 40) % 300));
          allreduce.run();
          for (std::int64_t i = 0; i < kCount; ++i) {
            const double sum = expected_sum(4, i) + run;  // four ranks' 0.25 * run
            ASSERT_EQ(data[static_cast<std::size_t>(i)], op == ReduceOp::kSum ? sum : sum / 4)
                << "rank " << comm->rank() << ", run " << run << ", element " << i;
          }
        }
        last[static_cast<std::size_t>(comm->rank())] = data;
      }
    });
    for (int r = 1; r < 4; ++r) {
      ASSERT_EQ(std::memcmp(last[0].data(), last[static_cast<std::size_t>(r)].data(), last[0].size() * sizeof(double)), 0)
          << "rank " << r << " differs from rank 0";
    }
  }
}

// The two single-host paths, each with a buffer of several chunks (the last one shorter). Chunk
// sizes are in bytes, counts in elements of at least 2 bytes; the paths are asserted.
struct OneHostCase {
  HierarchicalAllreduce::HostPath path;
  std::int64_t chunk_bytes;
  std::int64_t count;
};
constexpr OneHostCase kDirect{HierarchicalAllreduce::HostPath::direct, 4096, 3000};
// f32: chunks of 49152 elements, three (an odd count: a run's last chunk and the next run's
// first share a set of slots) and, in the second case, a last chunk of one element (its slices
// on other ranks are empty).
constexpr OneHostCase kScattered{HierarchicalAllreduce::HostPath::scattered, 192 << 10, 120000};
constexpr OneHostCase kScatteredOneElementTail{HierarchicalAllreduce::HostPath::scattered, 192 << 10, 3 * 49152 + 1};

// Both paths reuse a chunk's slots two chunks later, the scattered one its results too. Many
// back-to-back runs of a multi-chunk buffer, with inputs that change every run and ranks
// drifting apart (3 ranks on fewer cores, random pauses), would read a peer's next input (or a
// sum of them) if a slot came back too early.
TEST(HierarchicalOneHost, BackToBackRunsReadOnlyTheirOwnInputs) {
  for (const OneHostCase& one_host : {kDirect, kScattered, kScatteredOneElementTail})
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0}, std::vector<int>{0, 0, 0}}) {
    const int world = static_cast<int>(hosts.size());
    run_world(world, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(hosts);
      const std::int64_t count = one_host.count;
      std::vector<float> data(static_cast<std::size_t>(count));
      AllreduceSpec spec;
      spec.chunk_bytes = one_host.chunk_bytes;
      HierarchicalAllreduce allreduce(comm, Buffer{data.data(), count, DType::f32}, spec);
      ASSERT_EQ(allreduce.path(), one_host.path);
      std::uint64_t pause = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(comm->rank() + 1);
      for (int run = 0; run < 60; ++run) {
        for (std::int64_t i = 0; i < count; ++i) {
          data[static_cast<std::size_t>(i)] = static_cast<float>(input_value(comm->rank(), i) + 100 * run);
        }
        pause = pause * 6364136223846793005ull + 1442695040888963407ull;
        if ((pause >> 60) < 4) std::this_thread::sleep_for(std::chrono::microseconds((pause >> 40) % 300));
        allreduce.run();
        for (std::int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[static_cast<std::size_t>(i)], expected_sum(world, i) + 100.0 * run * world)
              << "rank " << comm->rank() << " of " << world << ", run " << run << ", element " << i;
        }
      }
    });
  }
}

// The one-pass sums of two slots (f32/f64) and the general form (three ranks, any type) on
// both single-host paths against the flat ring, sums and averages.
TEST(HierarchicalOneHost, EveryTypeSumsAndAveragesLikeTheFlatRing) {
  for (const OneHostCase& one_host : {kDirect, kScattered, kScatteredOneElementTail})
  for (int world : {2, 3}) {
    for (DType dtype : {DType::f32, DType::f64, DType::i64, DType::i32, DType::f16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        if (op == ReduceOp::kAverage && dtype != DType::f32 && dtype != DType::f64) continue;
        run_world(world, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
          comm->set_hosts(std::vector<int>(static_cast<std::size_t>(world), 0));
          const std::int64_t count = one_host.count;
          Tensor data = Tensor::empty(Shape{count}, DType::f64);
          for (std::int64_t i = 0; i < count; ++i) data.data<double>()[i] = input_value(comm->rank(), i);
          Tensor mine = data.to(dtype), flat = data.to(dtype);
          AllreduceSpec spec;
          spec.op = op;
          spec.chunk_bytes = one_host.chunk_bytes;
          HierarchicalAllreduce hierarchical(comm, Buffer::of(mine), spec);
          ASSERT_EQ(hierarchical.path(), one_host.path);
          hierarchical.run();
          RingAllreduce(comm, Buffer::of(flat), spec).run();
          const Tensor got = mine.to(DType::f64), want = flat.to(DType::f64);
          for (std::int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(got.data<double>()[i], want.data<double>()[i])
                << dtype_name(dtype) << (op == ReduceOp::kSum ? " sum" : " average") << " on " << world
                << " ranks, element " << i;
          }
        });
      }
    }
  }
}

// Sums that round: every rank must still hold the same bits, those of the sum in local-rank
// order, (x0 + x1 + x2) * (1/world), on both single-host paths.
TEST(HierarchicalOneHost, EveryRankHoldsTheBitsOfTheSumInRankOrder) {
  for (const OneHostCase& one_host : {kDirect, kScattered, kScatteredOneElementTail})
  for (int world : {2, 3}) {
    const std::int64_t count = one_host.count;
    auto input = [](int rank, std::int64_t i) {
      return static_cast<float>(0.1 * rank + 1e-3 * static_cast<double>(i) + 1.0 / static_cast<double>(i + 3));
    };
    std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
    run_world(world, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(std::vector<int>(static_cast<std::size_t>(world), 0));
      std::vector<float> data(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = input(comm->rank(), i);
      AllreduceSpec spec;
      spec.op = ReduceOp::kAverage;
      spec.chunk_bytes = one_host.chunk_bytes;
      HierarchicalAllreduce hierarchical(comm, Buffer{data.data(), count, DType::f32}, spec);
      ASSERT_EQ(hierarchical.path(), one_host.path);
      hierarchical.run();
      results[static_cast<std::size_t>(comm->rank())] = data;
    });
    for (std::int64_t i = 0; i < count; ++i) {
      float sum = input(0, i);
      for (int r = 1; r < world; ++r) sum += input(r, i);
      const float expected = sum * static_cast<float>(1.0 / world);
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(std::memcmp(&results[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], &expected, sizeof expected), 0)
            << "rank " << r << " of " << world << ", element " << i << ": " << results[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]
            << " vs " << expected;
      }
    }
  }
}

TEST(HierarchicalFacade, ChosenForSharedHostsAndAveragesExactly) {
  run_world(4, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 0, 1, 1});
    std::vector<double> data(50000);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = input_value(comm->rank(), static_cast<std::int64_t>(i));
    AllreduceSpec spec;
    spec.op = ReduceOp::kAverage;
    Allreduce allreduce(comm, Buffer{data.data(), 50000, DType::f64}, spec);
    EXPECT_STREQ(allreduce.algorithm(), "hierarchical");
    allreduce.run();
    for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], expected_sum(4, static_cast<std::int64_t>(i)) / 4);
    // A compressed wire keeps the shared memory; it applies to the ring between hosts.
    std::vector<float> f(50000, 1.0f);
    spec.wire = WireType::kF16;
    EXPECT_STREQ(Allreduce(comm, Buffer{f.data(), 50000, DType::f32}, spec).algorithm(), "hierarchical");
  });
}

// fp16 / bf16 between hosts: within the flat ring's error bound (each of the h - 1 hops between
// h hosts rounds a partial sum once, plus the final rounding), bitwise equal on every rank, and
// exact where every rank shares one host (nothing crosses a network there). Uneven hosts take
// the leaders' ring, even ones a ring per slice.
TEST(HierarchicalCompressedWire, WithinTheBoundBetweenHostsAndExactOnOneHost) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {0, 0, 1}, {0, 1, 1, 2}, {0, 0, 0}};
  constexpr std::int64_t kCount = 70001;
  for (const auto& hosts : layouts)
  for (WireType wire : {WireType::kF16, WireType::kBf16})
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const int world = static_cast<int>(hosts.size());
    const int host_count = *std::max_element(hosts.begin(), hosts.end()) + 1;
    const auto results = testing::run_compressed(world, hosts, wire, op, kCount, "hierarchical");
    const double eps = wire == WireType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    // One host: only the fp32 sums' own rounding.
    testing::expect_within_wire_bound(results, op == ReduceOp::kAverage ? world : 1,
                                      host_count == 1 ? 1e-6 : host_count * eps / 2,
                                      fmt::format("{} on {} ranks, {} hosts", wire_type_name(wire), world, host_count));
  }
}

// An fp16 overflow between hosts is redone in fp32: the sum is exact, on every rank, and only
// the slice that overflowed falls back; an average is pre-scaled and does not overflow.
TEST(HierarchicalCompressedWire, OverflowBetweenHostsFallsBackToFp32) {
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1}}) {
    const int world = static_cast<int>(hosts.size());
    constexpr std::int64_t kCount = 100000;
    std::vector<int> fallbacks(static_cast<std::size_t>(world));
    run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(hosts);
      std::vector<float> data(kCount, 1.5f);
      data[777] = 30000.0f;  // the hosts' sums (60000 or 30000 each) add up past fp16's 65504
      AllreduceSpec spec;
      spec.wire = WireType::kF16;
      Allreduce sum(comm, Buffer{data.data(), kCount, DType::f32}, spec);
      fallbacks[static_cast<std::size_t>(comm->rank())] = sum.run() ? 1 : 0;
      EXPECT_EQ(data[777], 30000.0f * static_cast<float>(world));
      EXPECT_EQ(data[0], 1.5f * static_cast<float>(world));
      std::vector<float> again(kCount, 1.5f);
      again[777] = 30000.0f;
      spec.op = ReduceOp::kAverage;
      Allreduce average(comm, Buffer{again.data(), kCount, DType::f32}, spec);
      EXPECT_FALSE(average.run());
      EXPECT_NEAR(again[777], 30000.0f, 30000.0f * 2 * std::ldexp(1.0, -11));
    });
    // Element 777 lies in local rank 0's slice (even hosts) or the leaders' whole buffer.
    EXPECT_EQ(fallbacks[0], 1);
    if (hosts == std::vector<int>{0, 0, 1, 1}) {
      EXPECT_EQ(fallbacks[1], 0) << "the second slice's ring did not overflow";
      EXPECT_EQ(fallbacks[2], 1);
    }
  }
}

TEST(HierarchicalFailures, SilentLocalRankTimesOutNamingIt) {
  std::vector<std::string> errors(3);
  run_world(3, ring_options(1, 1.0), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 0, 0});
    std::vector<float> data(1000, 1.0f);
    HierarchicalAllreduce allreduce(comm, Buffer{data.data(), 1000, DType::f32}, {});
    if (comm->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    try {
      allreduce.run();
    } catch (const TimeoutError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("local rank(s) 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("local rank(s) 1"), std::string::npos) << errors[2];
}

// Rank r's message in round k: (r * 37 + k * 11) % 300 bytes (empty ones included), plus 5000
// bytes from rank 1 in round 4 (past the 64-byte first capacity: every rank grows alike).
std::vector<std::byte> gather_message(int rank, int round) {
  std::size_t size = static_cast<std::size_t>((rank * 37 + round * 11) % 300);
  if (rank == 1 && round == 4) size = 5000;
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(rank) * 7 + static_cast<std::size_t>(round)) & 0xff);
  return bytes;
}

TEST(HostAllgather, EveryMessageInRankOrderAndViewsSurvivePeersRunningAhead) {
  for (int world : {1, 2, 3, 4}) {
    run_world(world, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
      comm->set_hosts(std::vector<int>(static_cast<std::size_t>(world), 0));
      ASSERT_TRUE(HostAllgather::applies(*comm));
      HostAllgather allgather(comm, 64);
      std::uint64_t pause = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(comm->rank() + 1);
      for (int round = 0; round < 40; ++round) {
        const auto mine = gather_message(comm->rank(), round);
        const auto all = allgather.run(mine);
        // Peers may be writing their next messages meanwhile: these views must not change.
        pause = pause * 6364136223846793005ull + 1442695040888963407ull;
        if ((pause >> 60) < 4) std::this_thread::sleep_for(std::chrono::microseconds((pause >> 40) % 300));
        ASSERT_EQ(all.size(), static_cast<std::size_t>(world));
        for (int r = 0; r < world; ++r) {
          const auto expected = gather_message(r, round);
          ASSERT_TRUE(std::equal(all[static_cast<std::size_t>(r)].begin(), all[static_cast<std::size_t>(r)].end(),
                                 expected.begin(), expected.end()))
              << "rank " << comm->rank() << " of " << world << ", round " << round << ", message of rank " << r;
        }
      }
      if (world > 1) {
        EXPECT_GE(allgather.capacity_bytes(), 5000u) << "rank " << comm->rank();
      }
    });
  }
}

TEST(HostAllgather, ServesOneHostOnlyAndNamesASilentRank) {
  run_world(2, ring_options(1), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 1});
    EXPECT_FALSE(HostAllgather::applies(*comm));
    EXPECT_THROW(HostAllgather(comm, 64), ConfigError);
  });
  std::vector<std::string> errors(3);
  run_world(3, ring_options(1, 1.0), [&](std::shared_ptr<Communicator> comm) {
    comm->set_hosts({0, 0, 0});
    HostAllgather allgather(comm, 64);
    if (comm->rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    const std::vector<std::byte> mine(10);
    try {
      allgather.run(mine);
    } catch (const TimeoutError& e) {
      errors[static_cast<std::size_t>(comm->rank())] = e.what();
    }
  });
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("host all-gather (messages written): timed out waiting for local rank(s) 2"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  }
}


// A process killed after creating a segment and before every local rank mapped it leaves the
// name linked (no destructor runs): the supervisor that reaps it removes what it left.
TEST(SharedMemorySegments, TheSegmentsOfADeadProcessAreRemovedByItsSupervisor) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Created and left linked: the process ends without running its destructors.
    auto* leaked = new SharedMemory(SharedMemory::create(segment_prefix(getpid()) + "test-0", 4096));
    (void)leaked;
    const char byte = 1;
    (void)!write(ready[1], &byte, 1);
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(ready[0]);
  close(ready[1]);
  const std::string name = segment_prefix(child) + "test-0";
  EXPECT_NO_THROW(SharedMemory::open(name, 4096)) << "the dead process's segment should still be linked";
  EXPECT_EQ(remove_segments_of(child), 1);
  EXPECT_THROW(SharedMemory::open(name, 4096), IoError);
  EXPECT_EQ(remove_segments_of(child), 0);
}

// A segment larger than /dev/shm can hold is refused when it is created, naming /dev/shm; it
// used to be created (ftruncate reserves nothing on tmpfs) and the first write past the space
// killed the process with SIGBUS. Run in a child with a private mount namespace over a 1 MiB
// tmpfs; skipped where this process may not mount (not root).
TEST(SharedMemorySegments, ASegmentLargerThanDevShmIsRefusedNotABusError) {
  int result[2];
  ASSERT_EQ(pipe(result), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char outcome = 's';  // skipped
    if (unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") == 0) {
      outcome = 'n';  // no error
      try {
        SharedMemory segment = SharedMemory::create("/aiacc-test-too-big", std::size_t{4} << 20);
        std::memset(segment.data(), 1, segment.size());  // the old build died here (SIGBUS)
      } catch (const IoError& e) {
        outcome = std::strstr(e.what(), "is /dev/shm large enough?") != nullptr ? 'r' : 'o';
      }
    }
    (void)!write(result[1], &outcome, 1);
    _exit(0);
  }
  close(result[1]);
  char outcome = 0;
  const ssize_t got = read(result[0], &outcome, 1);
  close(result[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(got, 1) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  if (outcome == 's') GTEST_SKIP() << "cannot mount a private tmpfs on /dev/shm here (needs root)";
  EXPECT_EQ(outcome, 'r') << "n: created and written without an error; o: another error";
}

}  // namespace
}  // namespace aiacc::ring
