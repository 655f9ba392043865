// Mesh: every pairing of ranks and streams connects to the right peer (checked by payload),
// ring-neighbour meshes, and handshake failures: a hello from the wrong rank or job is a
// CommError naming both ranks; a peer that never connects is a TimeoutError listing it, each
// link named as the mesh's owner names it (MeshSpec::stream_label) with its address.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/net/detail/hello.h"
#include "core/net/mesh.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::net {
namespace {

using aiacc::testing::LocalExchange;
using aiacc::testing::local_mesh;
using aiacc::testing::mesh_spec;
using aiacc::testing::run_ranks;
using aiacc::testing::silent_recv_error;
using aiacc::testing::labelled_spec;
using ::testing::HasSubstr;

// Sends (from, to, stream) on every channel and checks what arrives names the expected triple.
void check_wiring(Mesh& mesh) {
  const auto deadline = deadline_after(20);
  for (int peer : mesh.peers()) {
    for (int s = 0; s < mesh.streams(); ++s) {
      const int triple[3] = {mesh.rank(), peer, s};
      mesh.channel(peer, s).send(std::as_bytes(std::span(triple)), deadline, "wiring send");
    }
  }
  for (int peer : mesh.peers()) {
    for (int s = 0; s < mesh.streams(); ++s) {
      Message message = mesh.channel(peer, s).recv(deadline, "wiring recv");
      int triple[3];
      ASSERT_EQ(message.size(), sizeof triple);
      std::memcpy(triple, message.bytes().data(), sizeof triple);
      EXPECT_EQ(triple[0], peer);
      EXPECT_EQ(triple[1], mesh.rank());
      EXPECT_EQ(triple[2], s);
    }
  }
}

class FullMesh : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FullMesh, EveryChannelReachesTheRightPeerAndStream) {
  const auto [world, streams] = GetParam();
  LocalExchange exchange(world);
  run_ranks(world, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, world, streams));
    EXPECT_EQ(static_cast<int>(mesh.peers().size()), world - 1);
    check_wiring(mesh);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndStreams, FullMesh,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(1, 4)));

// 2 ranks x 600 streams: 600 channels and their 600 monitors per rank, past ZeroMQ's default
// of 1023 sockets per context (it failed with "Too many open files" at start-up).
TEST(Mesh, MoreConnectionsThanZeroMqsDefaultSocketLimit) {
  // Two ranks' 1200 channels and monitors, with their descriptors, in this one process.
  if (Context::create()->max_sockets() < 8192) {
    GTEST_SKIP() << "this process may open fewer than 8192 files (its hard RLIMIT_NOFILE): too few for the test";
  }
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, 2, 600));
    check_wiring(mesh);
  });
}

TEST(Mesh, RingNeighboursOnly) {
  const int world = 5;
  LocalExchange exchange(world);
  run_ranks(world, [&](int rank) {
    MeshSpec spec = mesh_spec(rank, world, 2);
    spec.peers = {(rank + world - 1) % world, (rank + 1) % world};
    Mesh mesh = local_mesh(exchange, spec);
    EXPECT_EQ(mesh.peers().size(), 2u);
    check_wiring(mesh);
    EXPECT_THROW(mesh.channel((rank + 2) % world), InternalError);
  });
}

TEST(Mesh, HelloFromTheWrongRankIsACommErrorNamingBoth) {
  auto context = Context::create();
  MeshListener listener(context, mesh_spec(0, 3, 1));  // expects rank 1 and rank 2
  std::string endpoint;
  for (const auto& entry : listener.addresses()) {
    int peer = -1;
    int stream = -1;
    std::string address;
    ASSERT_TRUE(parse_mesh_address(entry, peer, stream, address));
    if (peer == 1) endpoint = address;
  }
  ASSERT_FALSE(endpoint.empty());
  // An impostor on rank 1's socket claims to be rank 2.
  Socket impostor(context, ZMQ_PAIR, 0);
  impostor.connect(endpoint);
  const std::string hello =
      detail::encode_hello({detail::Hello::kHello, 2, 0, 0, "aiacc", "", ""});
  ASSERT_GE(zmq_send(impostor.handle(), hello.data(), hello.size(), 0), 0);
  try {
    Mesh mesh(std::move(listener), AddressTable(3), deadline_after(5));
    FAIL() << "expected CommError";
  } catch (const TimeoutError& e) {
    FAIL() << "expected a CommError, got a timeout: " << e.what();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 expected a hello from rank 1"));
    EXPECT_THAT(e.what(), HasSubstr("from rank 2"));
  }
  // The impostor is told why.
  ASSERT_TRUE(impostor.poll(ZMQ_POLLIN, 2000) & ZMQ_POLLIN);
  char buffer[1024];
  const int size = zmq_recv(impostor.handle(), buffer, sizeof buffer, 0);
  ASSERT_GT(size, 0);
  const auto reply = detail::decode_hello(
      std::as_bytes(std::span(buffer, static_cast<std::size_t>(size))), "test");
  EXPECT_EQ(reply.kind, detail::Hello::kReject);
}

TEST(Mesh, JobMismatchFailsBothSides) {
  LocalExchange exchange(2);
  std::atomic<int> failures{0};
  run_ranks(2, [&](int rank) {
    MeshSpec spec = mesh_spec(rank, 2, 1);
    spec.job = rank == 0 ? "job-a" : "job-b";
    try {
      local_mesh(exchange, spec);
      ADD_FAILURE() << "rank " << rank << ": expected CommError";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "rank " << rank << ": timeout instead of a CommError: " << e.what();
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("job-a"));
      EXPECT_THAT(e.what(), HasSubstr("job-b"));
      ++failures;
    }
  });
  EXPECT_EQ(failures, 2);
}

TEST(Mesh, PeerThatNeverConnectsIsATimeoutListingIt) {
  auto context = Context::create();
  MeshListener listener(context, mesh_spec(0, 3, 2));
  const auto start = Clock::now();
  try {
    Mesh mesh(std::move(listener), AddressTable(3), deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_LT(seconds_since(start), 1.3);
    EXPECT_THAT(e.what(), HasSubstr("mesh of rank 0"));
    EXPECT_THAT(e.what(), HasSubstr("rank 1 (stream 0; listening on this rank's tcp://"));
    EXPECT_THAT(e.what(), HasSubstr("rank 2 (stream 1; listening on this rank's tcp://"));
  }
}

// Start-up errors name each link as the mesh's owner does (a ring: "dense ring stream 0, from
// rank 2 to this rank"), with the address, on either side of the link: a rank that binds waits
// for a hello that does not come, one that connects for an answer from an address that
// refuses it (ZeroMQ retries the connection until the deadline).
TEST(Mesh, AStartUpTimeoutNamesEachLinkAsItsOwnerDoes) {
  auto context = Context::create();
  const MeshSpec binds = labelled_spec(0, 3, 2);
  try {
    Mesh mesh(MeshListener(context, binds), AddressTable(3), deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 (user stream 1 with rank 2; listening on this rank's tcp://127.0.0.1:"));
    EXPECT_THAT(e.what(), HasSubstr("): no hello received"));
  }
  const MeshSpec connects = labelled_spec(1, 2, 1);
  AddressTable table(2);
  table[0] = {"1:0=tcp://127.0.0.1:1"};  // nothing listens on port 1
  try {
    Mesh mesh(MeshListener(context, connects), table, deadline_after(0.3));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 (user stream 0 with rank 0; connecting to tcp://127.0.0.1:1): no answer "
                                    "to our hello"));
  }
}

// The channels keep those names: their errors once the mesh is up read as the start-up's.
TEST(Mesh, ChannelsAreNamedAsTheOwnerNamesThem) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, labelled_spec(rank, 2, 2));
    EXPECT_EQ(mesh.stream_name(1 - rank, 1), fmt::format("user stream 1 with rank {}", 1 - rank));
    EXPECT_THAT(silent_recv_error(mesh.channel(1 - rank, 1)),
                HasSubstr(fmt::format("recv from rank {} (user stream 1 with rank {};", 1 - rank, 1 - rank)));
  });
}

TEST(Mesh, PeerPublishingNoAddressForUsIsACommError) {
  auto context = Context::create();
  MeshListener listener(context, mesh_spec(1, 2, 1));  // rank 1 connects to rank 0
  AddressTable table(2);
  table[0] = {"5:0=tcp://127.0.0.1:1"};  // rank 0 listens for someone else
  try {
    Mesh mesh(std::move(listener), table, deadline_after(2));
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 publishes no address for its link with this rank (stream 0)"));
  }
}

TEST(Mesh, BadSpecIsACommError) {
  auto context = Context::create();
  EXPECT_THROW(MeshListener(context, mesh_spec(3, 3, 1)), CommError);
  EXPECT_THROW(MeshListener(context, mesh_spec(0, 2, 0)), CommError);
  MeshSpec spec = mesh_spec(0, 2, 1);
  spec.peers = {0};
  EXPECT_THROW(MeshListener(context, spec), CommError);
}

}  // namespace
}  // namespace aiacc::net
