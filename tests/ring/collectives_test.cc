// Broadcast, allgather and barrier against known results, world sizes 1-6; start-up errors
// of Communicator::connect naming the ring's streams as the user knows them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/net/security.h"
#include "ring/allgather.h"
#include "ring/barrier.h"
#include "ring/broadcast.h"
#include "ring/communicator.h"
#include "tests/ring/ring_fixture.h"

namespace aiacc::ring {
namespace {

using testing::ring_options;
using testing::run_world;
using ::testing::HasSubstr;

TEST(Broadcast, EveryRankGetsTheRootsBytes) {
  for (int world = 1; world <= 6; ++world) {
    for (int root : {0, world - 1}) {
      run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
        std::vector<std::int64_t> data(30011);
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = comm->rank() == root ? static_cast<std::int64_t>(i * 31 + 7) : -1;
        Broadcast(comm, Buffer{data.data(), static_cast<std::int64_t>(data.size()), DType::i64}, root, 10000).run();
        for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<std::int64_t>(i * 31 + 7)) << "rank " << comm->rank();
      });
    }
  }
}

TEST(Broadcast, RootOutsideTheWorldIsAConfigError) {
  run_world(2, ring_options(), [&](std::shared_ptr<Communicator> comm) {
    float x = 0;
    EXPECT_THROW(Broadcast(comm, Buffer{&x, 1, DType::f32}, 2), ConfigError);
  });
}

TEST(Allgather, BlocksArriveInRankOrder) {
  for (int world = 1; world <= 6; ++world) {
    for (std::int64_t block : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7777}}) {
      run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
        std::vector<float> data(static_cast<std::size_t>(block * world), -1.0f);
        for (std::int64_t i = 0; i < block; ++i) data[static_cast<std::size_t>(comm->rank() * block + i)] = static_cast<float>(comm->rank() * 100000 + i);
        Allgather(comm, Buffer{data.data(), block * world, DType::f32}).run();
        for (int r = 0; r < world; ++r) {
          for (std::int64_t i = 0; i < block; ++i) ASSERT_EQ(data[static_cast<std::size_t>(r * block + i)], static_cast<float>(r * 100000 + i));
        }
      });
    }
  }
}

TEST(Barrier, NoRankLeavesBeforeAllArrive) {
  for (int world = 1; world <= 5; ++world) {
    std::atomic<int> arrived{0};
    run_world(world, ring_options(), [&](std::shared_ptr<Communicator> comm) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * comm->rank()));
      ++arrived;
      barrier(*comm);
      EXPECT_EQ(arrived.load(), world);
      barrier(*comm, "second");
    });
  }
}

TEST(Barrier, MissingRankTimesOutNamingTheBarrier) {
  try {
    run_world(3, ring_options(1, 0.5), [&](std::shared_ptr<Communicator> comm) {
      if (comm->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      barrier(*comm, "end of epoch");
    });
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("end of epoch"), std::string::npos) << e.what();
  }
}

// A ring whose mesh runs under CURVE keeps its encrypted ZeroMQ channels: auto picks zmq (and
// a broadcast works), an explicit tcp is a ConfigError on every rank instead of plain text.
TEST(CommunicatorTransport, CurveMeshesKeepTheirEncryptedChannels) {
  const std::string token = net::generate_job_token();
  for (const char* transport : {"auto", "tcp"}) {
    testing::LocalExchange exchange(2);
    std::vector<std::string> outcome(2);
    testing::run_ranks(2, [&](int rank) {
      const auto options = ring_options(1, 10.0, transport);
      net::MeshListener listener(net::Context::create(1, net::CurveKeys::from_token(token)),
                                 Communicator::make_mesh_spec(rank, 2, options, "curve-test"));
      auto table = exchange.exchange(rank, listener.addresses());
      net::Mesh mesh(std::move(listener), table, net::deadline_after(10));
      try {
        auto comm = std::make_shared<Communicator>(std::move(mesh), options);
        int value = rank == 0 ? 42 : 0;
        Broadcast(comm, Buffer{&value, 1, DType::i32}, 0).run();
        outcome[static_cast<std::size_t>(rank)] = fmt::format("{} {}", comm->transport(), value);
      } catch (const ConfigError& e) {
        outcome[static_cast<std::size_t>(rank)] = e.what();
      }
    });
    for (const std::string& o : outcome) {
      if (std::string(transport) == "auto") {
        EXPECT_EQ(o, "zmq 42");
      } else {
        EXPECT_NE(o.find("unencrypted"), std::string::npos) << o;
      }
    }
  }
}

// Two ranks join the store; `absent` never connects its ring. Returns the start-up error of
// the other, which connects the "dense" ring with a short connect timeout.
std::string connect_error_without(int absent) {
  net::RendezvousServer server(net::Context::create(), "127.0.0.1", 0);
  std::string error;
  std::latch done(1);
  testing::run_ranks(2, [&](int rank) {
    net::RendezvousClient client(net::Context::create(), server.endpoint());
    client.register_rank(rank, 2, {}, net::deadline_after(10));
    client.wait_all(net::deadline_after(10));
    if (rank == absent) {
      done.wait();
      return;
    }
    auto options = ring_options(1, 5.0);
    options.channel.connect_timeout_s = 0.5;
    try {
      Communicator::connect(net::Context::create(), client, rank, 2, options, "dense");
      ADD_FAILURE() << "rank " << rank << " connected without its peer";
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    done.count_down();
  });
  return error;
}

// Rank 0 binds both directions' links to rank 1 and waits for its hellos: the error names them
// as the links' own errors do later (the configured stream and the direction, not the mesh's
// stream 0 and 1), with the addresses it waited on.
TEST(CommunicatorConnect, APeerThatNeverConnectsIsNamedWithTheRingStreams) {
  const std::string error = connect_error_without(1);
  EXPECT_THAT(error, HasSubstr("rank 1 (dense ring stream 0, from this rank to rank 1; listening on this rank's tcp://"));
  EXPECT_THAT(error, HasSubstr("rank 1 (dense ring stream 0, from rank 1 to this rank; listening on this rank's tcp://"));
  EXPECT_THAT(error, HasSubstr("no hello received"));
}

// Rank 1 connects to the addresses rank 0 publishes at the store, which never come.
TEST(CommunicatorConnect, APeerThatNeverPublishesItsAddressesIsNamedWithTheRingStreams) {
  const std::string error = connect_error_without(0);
  EXPECT_THAT(error, HasSubstr("rank 0 did not publish its addresses"));
  EXPECT_THAT(error, HasSubstr("dense ring stream 0, from this rank to rank 0"));
}

TEST(SplitWeighted, CoversTheRangeInOrder) {
  const auto ranges = split_weighted(1000, {1, 3, 2}, 64);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].begin, 0);
  EXPECT_EQ(ranges[2].end, 1000);
  for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].begin, ranges[i - 1].end);
  EXPECT_EQ(ranges[0].end % 64, 0);
  const auto tiny = split_weighted(3, {1, 1, 1}, 64);
  EXPECT_EQ(tiny[0].size() + tiny[1].size() + tiny[2].size(), 3);
}

// Streams switched off (weight 0, set_active_streams) get nothing; the rounding's tail goes to
// the last active one. It used to go to the last stream, which then ran a ring of its own for
// a few elements every run (1000 elements on 1 of 4 streams: [0, 960) and [960, 1000)).
TEST(SplitWeighted, StreamsSwitchedOffGetNothing) {
  const auto one = split_weighted(1000, {1, 0, 0, 0}, 64);
  EXPECT_EQ(one[0].begin, 0);
  EXPECT_EQ(one[0].end, 1000);
  for (std::size_t i = 1; i < one.size(); ++i) EXPECT_EQ(one[i].size(), 0) << "stream " << i;
  const auto two = split_weighted(1000, {1, 1, 0, 0}, 64);
  EXPECT_EQ(two[0].end, two[1].begin);
  EXPECT_EQ(two[1].end, 1000);
  EXPECT_EQ(two[2].size() + two[3].size(), 0);
}

}  // namespace
}  // namespace aiacc::ring
