// TcpLink and TcpMesh: exact bytes in order for every size (empty, small, larger than the
// kernel's buffers), posts that progress while their thread waits to receive (no deadlock with
// tiny buffers), waits that spin or sleep, deadlines that name the peer and the operation, a
// dead peer reported at once, and a mesh over three ranks with several streams; its start-up
// errors (a peer that never connects, a refused connection) name the links as the owner does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <latch>
#include <thread>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/net/mesh.h"
#include "core/net/peer_timeout_error.h"
#include "core/net/security.h"
#include "core/net/tcp_mesh.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::net {
namespace {

using aiacc::testing::LocalExchange;
using aiacc::testing::local_mesh;
using aiacc::testing::mesh_spec;
using aiacc::testing::pattern;
using aiacc::testing::run_ranks;
using aiacc::testing::same_bytes;
using aiacc::testing::silent_recv_error;
using aiacc::testing::labelled_spec;
using ::testing::HasSubstr;
using ::testing::Not;

// Two ranks joined by one TCP stream: fn(rank, the link to the other rank).
void with_one_link(const TcpMeshOptions& options, const std::function<void(int rank, TcpLink& link)>& fn) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, 2, 1));
    TcpMesh tcp(mesh, options, deadline_after(10));
    fn(rank, tcp.link(1 - rank, 0));
  });
}

const std::vector<std::size_t> kSizes = {0, 1, 7, 8, 4096, 65537, 3 << 20};

// (spin us, kernel buffer bytes: 0 = auto-tuned)
class TcpLinkExchange : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TcpLinkExchange, BothDirectionsAtOnceDeliverExactBytesInOrder) {
  const auto [spin_us, buffer_bytes] = GetParam();
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, 2, 2));
    TcpMeshOptions options;
    options.spin_us = spin_us;
    options.send_buffer_bytes = buffer_bytes;
    options.recv_buffer_bytes = buffer_bytes;
    TcpMesh tcp(mesh, options, deadline_after(10));
    const int peer = 1 - rank;
    // Directed as the ring uses them: rank 0 sends on stream 0, rank 1 on stream 1.
    TcpLink& out = tcp.link(peer, rank);
    TcpLink& in = tcp.link(peer, 1 - rank);
    std::vector<std::vector<std::byte>> sent;
    for (std::size_t i = 0; i < kSizes.size(); ++i) sent.push_back(pattern(kSizes[i], 100 * rank + i));
    const auto deadline = deadline_after(20);
    // Everything posted before the first receive: with small buffers the posts can only
    // finish while this thread waits in recv.
    for (const auto& bytes : sent) out.post(bytes, deadline, "test post");
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      Message message = in.recv(deadline, "test recv");
      const auto expected = pattern(kSizes[i], 100 * peer + i);
      ASSERT_TRUE(same_bytes(message.bytes(), expected)) << "message " << i << " of " << kSizes[i] << " bytes";
    }
    out.wait_posted(deadline, "test drain");
    // Once more on the same links, received in place (a blocking send of 3 MiB each way would
    // wait forever with small buffers: neither side would be reading).
    out.post(sent[6], deadline, "test post");
    std::vector<std::byte> place(kSizes[6]);
    in.recv_into(place, deadline, "test recv_into");
    out.wait_posted(deadline, "test drain");
    EXPECT_TRUE(same_bytes(place, pattern(kSizes[6], 100 * peer + 6)));
  });
}

INSTANTIATE_TEST_SUITE_P(SpinAndBuffers, TcpLinkExchange,
                         ::testing::Values(std::tuple{0, 0}, std::tuple{50, 0}, std::tuple{0, 4096}, std::tuple{50, 4096}),
                         [](const auto& info) {
                           return fmt::format("spin{}_buffer{}", std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(TcpLink, SilentPeerTimesOutNamingPeerAndOperationAndTheLinkStaysUsable) {
  std::latch timed_out(1);
  with_one_link({}, [&](int rank, TcpLink& link) {
    if (rank == 1) {
      timed_out.wait();
      link.send(pattern(100, 9), deadline_after(5), "late message");
      return;
    }
    const auto start = Clock::now();
    try {
      link.recv(deadline_after(0.3), "ring allreduce bucket 3");
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const PeerTimeoutError& e) {
      EXPECT_GE(seconds_since(start), 0.29);
      EXPECT_EQ(e.peer(), 1);
      // Unlabelled, the stream is the mesh's.
      EXPECT_THAT(e.what(), HasSubstr("recv from rank 1 (stream " + std::to_string(link.stream()) + "; tcp "));
      EXPECT_THAT(e.what(), HasSubstr("ring allreduce bucket 3"));
    }
    timed_out.count_down();
    // Nothing of a message had arrived: the stream is intact.
    EXPECT_TRUE(same_bytes(link.recv(deadline_after(5), "after timeout").bytes(), pattern(100, 9)));
  });
}

TEST(TcpLink, BlockedSenderTimesOutNamingPeerAndClosesTheLink) {
  std::latch done(1);
  TcpMeshOptions options;
  options.send_buffer_bytes = 4096;
  options.recv_buffer_bytes = 4096;
  with_one_link(options, [&](int rank, TcpLink& link) {
    if (rank == 1) {  // never reads
      done.wait();
      return;
    }
    const auto big = pattern(8 << 20, 1);
    try {
      link.send(big, deadline_after(0.3), "broadcast of the weights");
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("send to rank 1"));
      EXPECT_THAT(e.what(), HasSubstr("broadcast of the weights"));
    }
    // Part of the message went out: the link cannot continue and says so.
    EXPECT_FALSE(link.is_open());
    EXPECT_THROW(link.send(big, deadline_after(1), "after"), CommError);
    done.count_down();
  });
}

TEST(TcpLink, RecvIntoABufferOfAnotherSizeNamesBothSizesAndClosesTheLink) {
  with_one_link({}, [&](int rank, TcpLink& link) {
    if (rank == 1) {
      link.send(pattern(1000, 1), deadline_after(5), "bucket");
      return;
    }
    std::vector<std::byte> place(999);
    // Its owner names the stream as its user knows it (ring/communicator.cc).
    link.set_stream_label("dense ring stream 2, from rank 1 to this rank");
    try {
      link.recv_into(place, deadline_after(5), "ring allreduce all-gather step 1");
      ADD_FAILURE() << "expected CommError";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("rank 1 sent 1000 bytes (dense ring stream 2, from rank 1 to this rank)"));
      EXPECT_THAT(e.what(), HasSubstr("expected 999"));
      EXPECT_THAT(e.what(), HasSubstr("all-gather step 1"));
    }
    EXPECT_FALSE(link.is_open());
  });
}

TEST(TcpLink, DeadPeerDeliversWhatItSentThenFailsAtOnceNamingIt) {
  with_one_link({}, [&](int rank, TcpLink& link) {
    if (rank == 1) {
      link.send(pattern(10, 1), deadline_after(5), "first");
      link.send(pattern(70000, 2), deadline_after(5), "second");
      link.close();
      return;
    }
    const auto deadline = deadline_after(20);
    EXPECT_TRUE(same_bytes(link.recv(deadline, "a").bytes(), pattern(10, 1)));
    EXPECT_TRUE(same_bytes(link.recv(deadline, "b").bytes(), pattern(70000, 2)));
    const auto start = Clock::now();
    try {
      link.recv(deadline, "ring allreduce all-gather step 0");
      ADD_FAILURE() << "expected CommError";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "a closed peer must be reported at once: " << e.what();
    } catch (const CommError& e) {
      EXPECT_LT(seconds_since(start), 5.0);
      EXPECT_THAT(e.what(), HasSubstr("disconnected"));
      EXPECT_THAT(e.what(), HasSubstr("recv from rank 1"));
      EXPECT_THAT(e.what(), HasSubstr("all-gather step 0"));
    }
  });
}

TEST(TcpMesh, ThreeRanksWithThreeStreamsEachReachEveryPeerOnEveryStream) {
  constexpr int kWorld = 3, kStreams = 3;
  LocalExchange exchange(kWorld);
  run_ranks(kWorld, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, kWorld, kStreams));
    TcpMeshOptions options;
    options.spin_us = 20;
    TcpMesh tcp(mesh, options, deadline_after(10));
    EXPECT_EQ(tcp.spin_us(), 20);
    const auto deadline = deadline_after(20);
    // Every rank sends one message per (peer, stream) naming itself, the peer and the stream,
    // then receives every peer's on every stream: links are paired correctly or the bytes differ.
    auto seed = [](int from, int to, int stream) { return static_cast<std::uint64_t>(100 * from + 10 * to + stream); };
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == rank) continue;
      for (int stream = 0; stream < kStreams; ++stream) {
        tcp.link(peer, stream).send(pattern(1000, seed(rank, peer, stream)), deadline, "hello");
      }
    }
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == rank) continue;
      for (int stream = 0; stream < kStreams; ++stream) {
        TcpLink& link = tcp.link(peer, stream);
        EXPECT_EQ(link.peer(), peer);
        EXPECT_EQ(link.stream(), stream);
        EXPECT_TRUE(same_bytes(link.recv(deadline, "hello").bytes(), pattern(1000, seed(peer, rank, stream))))
            << "rank " << rank << " from " << peer << " stream " << stream;
      }
    }
    EXPECT_THROW(tcp.link(rank, 0), InternalError);
  });
}

// The TimeoutError of the rank of two that builds its TCP mesh (2 streams, links named by
// labelled_spec) when rank `absent` never does.
std::string tcp_mesh_timeout_without(int absent) {
  LocalExchange exchange(2);
  std::latch failed(1);
  std::string error;
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, labelled_spec(rank, 2, 2));
    if (rank == absent) {
      failed.wait();
      return;
    }
    try {
      TcpMesh tcp(mesh, {}, deadline_after(0.3));
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    failed.count_down();
  });
  return error;
}

// Start-up errors name the links as the mesh's owner does (MeshSpec::stream_label), with the
// address: a rank whose lower peer never sends its address names the mesh link it waited on;
// one whose higher peer never connects lists that peer's links and where it listened; one
// whose connection is refused names the link and the address it tried.
TEST(TcpMesh, AMissingPeerIsATimeoutNamingIt) {
  EXPECT_THAT(tcp_mesh_timeout_without(0), HasSubstr("recv from rank 0 (user stream 0 with rank 0; connected to tcp://"));
  const std::string error = tcp_mesh_timeout_without(1);
  EXPECT_THAT(error, HasSubstr("tcp mesh: rank 0 timed out waiting on 127.0.0.1:"));
  EXPECT_THAT(error, HasSubstr("for connections from: rank 1 (user stream 0 with rank 1), rank 1 (user stream 1 "
                               "with rank 1)"));
}

TEST(TcpMesh, ARefusedConnectionNamesTheLinkAndTheAddress) {
  LocalExchange exchange(2);
  // Bound but not listening: connections to it are refused.
  io::FileDescriptor closed(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(closed.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(closed.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  std::latch done(1);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, labelled_spec(rank, 2, 1));
    if (rank == 0) {  // publishes an address where nothing accepts, as a rank that died would
      const std::string text = fmt::format("tcp 127.0.0.1 {} {}", port, std::string(64, 'a'));
      mesh.channel(1, 0).send(std::as_bytes(std::span(text)), deadline_after(5), "address");
      done.wait();
      return;
    }
    try {
      TcpMesh tcp(mesh, {}, deadline_after(5));
      ADD_FAILURE() << "expected CommError";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("connect failed: Connection refused"));
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("tcp mesh: rank 1 connecting to rank 0 (user stream 0 with rank 0) "
                                                  "at 127.0.0.1:{}", port)));
    }
    done.count_down();
  });
}

// The links keep those names once the mesh is up.
TEST(TcpMesh, LinksAreNamedAsTheOwnerNamesThem) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, labelled_spec(rank, 2, 1));
    TcpMesh tcp(mesh, {}, deadline_after(10));
    EXPECT_THAT(silent_recv_error(tcp.link(1 - rank, 0)),
                HasSubstr(fmt::format("recv from rank {} (user stream 0 with rank {};", 1 - rank, 1 - rank)));
  });
}

TEST(TcpMesh, WithAHelloKeyLinksProveTheTokenAndCarryBytes) {
  const CurveKey key = CurveKeys::from_token(generate_job_token()).hello_key;
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    auto spec = mesh_spec(rank, 2, 2);
    spec.hello_key = key;
    Mesh mesh = local_mesh(exchange, spec);
    TcpMesh tcp(mesh, {}, deadline_after(10));
    const int peer = 1 - rank;
    tcp.link(peer, rank).send(pattern(333, rank), deadline_after(10), "proven");
    EXPECT_TRUE(same_bytes(tcp.link(peer, peer).recv(deadline_after(10), "proven").bytes(), pattern(333, peer)));
  });
}

// A process that learnt the listener's address but sends no valid hello (a scanner, another
// job) is refused; the rank that waits for the real peer names it when its deadline passes.
TEST(TcpMesh, AForeignHelloIsRefusedAndTheMissingPeerNamed) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, 2, 1));
    if (rank == 0) {
      try {
        TcpMesh tcp(mesh, {}, deadline_after(1.0));
        ADD_FAILURE() << "expected TimeoutError";
      } catch (const TimeoutError& e) {
        EXPECT_THAT(e.what(), HasSubstr("rank 1 (stream 0)"));
      }
      return;
    }
    // Rank 1 plays the intruder: it reads rank 0's address and sends garbage as its hello.
    const Message address = mesh.channel(0, 0).recv(deadline_after(5), "address");
    std::istringstream in(std::string(reinterpret_cast<const char*>(address.bytes().data()), address.size()));
    std::string tag, host;
    int port = 0;
    ASSERT_TRUE(in >> tag >> host >> port);
    io::FileDescriptor fd(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_port = htons(static_cast<std::uint16_t>(port));
    ASSERT_EQ(inet_pton(AF_INET, host.c_str(), &target.sin_addr), 1);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&target), sizeof target), 0);
    const std::string garbage(200, 'x');
    ASSERT_EQ(::send(fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL), static_cast<ssize_t>(garbage.size()));
    char byte = 0;
    EXPECT_LE(::recv(fd.get(), &byte, 1, 0), 0) << "the intruder got an answer";
  });
}

// Idle connections (a scanner) beyond the table of pending hellos push out the oldest, never
// a real peer: rank 2 opens 70 silent connections to rank 0's listener before rank 1 connects;
// rank 0 still gets rank 1's hello and times out waiting for rank 2 alone.
TEST(TcpMesh, IdleConnectionsCannotShutARealPeerOut) {
  LocalExchange exchange(3);
  std::latch flooded(1);
  run_ranks(3, [&](int rank) {
    Mesh mesh = local_mesh(exchange, mesh_spec(rank, 3, 1));
    if (rank == 2) {
      std::vector<io::FileDescriptor> idle;
      try {
        const Message address = mesh.channel(0, 0).recv(deadline_after(5), "address");
        std::istringstream in(std::string(reinterpret_cast<const char*>(address.bytes().data()), address.size()));
        std::string tag, host;
        int port = 0;
        ASSERT_TRUE(in >> tag >> host >> port);
        sockaddr_in target{};
        target.sin_family = AF_INET;
        target.sin_port = htons(static_cast<std::uint16_t>(port));
        ASSERT_EQ(inet_pton(AF_INET, host.c_str(), &target.sin_addr), 1);
        for (int i = 0; i < 70; ++i) {
          idle.emplace_back(::socket(AF_INET, SOCK_STREAM, 0));
          ASSERT_EQ(::connect(idle.back().get(), reinterpret_cast<sockaddr*>(&target), sizeof target), 0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted
      } catch (...) {
        flooded.count_down();
        throw;
      }
      flooded.count_down();
      std::this_thread::sleep_for(std::chrono::milliseconds(4500));  // idle until the others gave up
      return;
    }
    if (rank == 1) flooded.wait();
    try {
      // Long enough for rank 1 to connect after the flood on a loaded machine; the flooder
      // (which never builds its TCP mesh) is missing either way.
      TcpMesh tcp(mesh, {}, deadline_after(4.0));
      ADD_FAILURE() << "rank " << rank << ": expected TimeoutError";
    } catch (const TimeoutError& e) {
      if (rank == 0) {
        EXPECT_THAT(e.what(), HasSubstr("for connections from: rank 2 (stream 0)"));
        EXPECT_THAT(e.what(), Not(HasSubstr("rank 1 (")));
      }
    } catch (const CommError& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  });
}

}  // namespace
}  // namespace aiacc::net
