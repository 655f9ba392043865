// Channel over loopback between ranks as threads: exact bytes for sizes 0 B..64 MiB, K = 1 and
// 4 streams, both directions at once, copying and zero-copy sends; ordering; multipart; and
// the failure paths (silent peer, closed peer, blocked sender) end in errors that name the
// peer and the operation within deadline + 1 s (a closed peer: at once), never hangs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <tuple>

#include "core/error.h"
#include "core/net/mesh.h"
#include "core/net/peer_timeout_error.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"

namespace aiacc::net {
namespace {

using aiacc::testing::fast_options;
using aiacc::testing::LocalExchange;
using aiacc::testing::local_mesh;
using aiacc::testing::pattern;
using aiacc::testing::run_ranks;
using aiacc::testing::same_bytes;
using ::testing::HasSubstr;

constexpr std::size_t kMiB = 1 << 20;

MeshSpec two_rank_spec(int rank, int streams, ChannelOptions options = fast_options()) {
  MeshSpec spec;
  spec.rank = rank;
  spec.world_size = 2;
  spec.streams = streams;
  spec.channel = options;
  return spec;
}

// (streams, message bytes, zero-copy)
class ChannelExchange : public ::testing::TestWithParam<std::tuple<int, std::size_t, bool>> {};

TEST_P(ChannelExchange, BothDirectionsAtOnceDeliverExactBytes) {
  const auto [streams, size, zero_copy] = GetParam();
  ChannelOptions options = fast_options();
  options.zero_copy_min_bytes = zero_copy ? 0 : -1;
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, streams, options));
    const int peer = 1 - rank;
    const auto deadline = deadline_after(30);
    std::vector<std::vector<std::byte>> outgoing;
    for (int s = 0; s < streams; ++s) outgoing.push_back(pattern(size, rank * 16 + s));
    // Every rank sends on every stream before receiving anything: must not deadlock.
    for (int s = 0; s < streams; ++s) {
      mesh.channel(peer, s).send(outgoing[s], deadline, "exchange send");
    }
    for (int s = 0; s < streams; ++s) {
      Message message = mesh.channel(peer, s).recv(deadline, "exchange recv");
      const auto expected = pattern(size, peer * 16 + s);
      ASSERT_EQ(message.size(), size) << "stream " << s;
      ASSERT_TRUE(same_bytes(message.bytes(), expected)) << "stream " << s;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    SizesStreamsModes, ChannelExchange,
    ::testing::Combine(::testing::Values(1, 4),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{4096},
                                         64 * kMiB),
                       ::testing::Bool()),
    [](const auto& info) {
      return "K" + std::to_string(std::get<0>(info.param)) + "_" +
             std::to_string(std::get<1>(info.param)) + "B_" +
             (std::get<2>(info.param) ? "zerocopy" : "copy");
    });

TEST(Channel, ThousandSmallMessagesArriveInOrder) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1));
    Channel& channel = mesh.channel(1 - rank);
    const auto deadline = deadline_after(20);
    for (std::uint32_t i = 0; i < 1000; ++i) {
      channel.send(std::as_bytes(std::span(&i, 1)), deadline, "ordered send");
    }
    for (std::uint32_t i = 0; i < 1000; ++i) {
      Message message = channel.recv(deadline, "ordered recv");
      std::uint32_t value = 0;
      ASSERT_EQ(message.size(), sizeof value);
      std::memcpy(&value, message.bytes().data(), sizeof value);
      ASSERT_EQ(value, i);
    }
  });
}

TEST(Channel, MultipartArrivesWholeAndRecvRejectsIt) {
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    ChannelOptions options = fast_options();
    options.zero_copy_min_bytes = 1000;  // mix copied and zero-copy parts
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1, options));
    Channel& channel = mesh.channel(1 - rank);
    const auto deadline = deadline_after(20);
    const auto big = pattern(100000, 7);
    const std::string header = "keys";
    if (rank == 0) {
      const std::span<const std::byte> parts[] = {
          {}, std::as_bytes(std::span(header)), big};
      channel.send_parts(parts, deadline, "push");
      channel.send_parts(parts, deadline, "push again");
      return;
    }
    auto parts = channel.recv_parts(deadline, "recv push");
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0].size(), 0u);
    EXPECT_TRUE(same_bytes(parts[1].bytes(), std::as_bytes(std::span(header))));
    EXPECT_TRUE(same_bytes(parts[2].bytes(), big));
    try {
      channel.recv(deadline, "recv as single frame");
      ADD_FAILURE() << "expected CommError";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("3 frames"));
      EXPECT_THAT(e.what(), HasSubstr("rank 0"));
    }
  });
}

TEST(Channel, SilentPeerTimesOutWithinDeadlineNamingPeerAndOperation) {
  LocalExchange exchange(2);
  std::latch done(1);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1));
    if (rank == 1) {  // connected, alive, never sends
      done.wait();
      return;
    }
    const double timeout_s = 0.5;
    const auto start = Clock::now();
    try {
      mesh.channel(1).recv(deadline_after(timeout_s), "ring allreduce bucket 3");
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const PeerTimeoutError& e) {
      EXPECT_EQ(e.peer(), 1);
      const double waited = seconds_since(start);
      EXPECT_GE(waited, timeout_s - 0.01);
      EXPECT_LT(waited, timeout_s + 1.0);
      EXPECT_THAT(e.what(), HasSubstr("recv from rank 1"));
      EXPECT_THAT(e.what(), HasSubstr("ring allreduce bucket 3"));
      EXPECT_THAT(e.what(), HasSubstr("timed out after 0."));
    }
    done.count_down();
  });
}

// (closing rank) A peer that closes its end after sending: what it sent arrives, then the
// next recv fails at once with a CommError naming it, long before the deadline. Both the
// binding side (rank 0) and the connecting side (rank 1) must notice.
class PeerClosing : public ::testing::TestWithParam<int> {};

TEST_P(PeerClosing, DeliversWhatItSentThenFailsFastNamingIt) {
  const int closer = GetParam();
  const int reader = 1 - closer;
  LocalExchange exchange(2);
  std::latch done(1);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1));
    const auto deadline = deadline_after(10);
    if (rank == closer) {
      const auto payload = pattern(1 * kMiB, 3);
      for (int i = 0; i < 3; ++i) mesh.channel(reader).send(payload, deadline, "send then close");
      mesh.channel(reader).close();  // linger still delivers the three messages
      done.wait();
      return;
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(mesh.channel(closer).recv(deadline, "recv before close").size(), 1 * kMiB);
    }
    const auto start = Clock::now();
    try {
      mesh.channel(closer).recv(deadline_after(10), "recv after peer closed");
      ADD_FAILURE() << "expected CommError";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "timed out instead of noticing the disconnect: " << e.what();
    } catch (const CommError& e) {
      EXPECT_LT(seconds_since(start), 2.0);
      EXPECT_THAT(e.what(), HasSubstr("disconnected"));
      EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(closer)));
      EXPECT_THAT(e.what(), HasSubstr("recv after peer closed"));
    }
    done.count_down();
  });
}

INSTANTIATE_TEST_SUITE_P(BindAndConnectSide, PeerClosing, ::testing::Values(0, 1));

// (zero-copy) A sender whose peer never reads fills the high-water marks and kernel buffers,
// then times out naming the peer. Zero-copy must also close the channel so that ZeroMQ drops
// the caller's buffer before send() returns.
class BlockedSender : public ::testing::TestWithParam<bool> {};

TEST_P(BlockedSender, TimesOutNamingPeer) {
  const bool zero_copy = GetParam();
  ChannelOptions options = fast_options();
  options.send_hwm = 1;
  options.recv_hwm = 1;
  options.send_buffer_bytes = 4096;
  options.recv_buffer_bytes = 4096;
  options.zero_copy_min_bytes = zero_copy ? 0 : -1;
  LocalExchange exchange(2);
  std::latch done(1);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1, options));
    if (rank == 1) {
      done.wait();
      return;
    }
    const auto payload = pattern(1 * kMiB, 1);
    const auto start = Clock::now();
    const auto deadline = deadline_after(0.5);
    try {
      for (int i = 0; i < 1000; ++i) mesh.channel(1).send(payload, deadline, "push shard 0");
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      EXPECT_LT(seconds_since(start), 1.5);
      EXPECT_THAT(e.what(), HasSubstr("rank 1"));
      EXPECT_THAT(e.what(), HasSubstr("push shard 0"));
    }
    if (zero_copy) {
      EXPECT_FALSE(mesh.channel(1).is_open());
      EXPECT_THROW(mesh.channel(1).send(payload, deadline_after(1), "after"), CommError);
    }
    done.count_down();
  });
}

INSTANTIATE_TEST_SUITE_P(CopyAndZeroCopy, BlockedSender, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "zerocopy" : "copy"; });

TEST(Channel, SmallKernelBuffersStillDeliverLargeMessages) {
  ChannelOptions options = fast_options();
  options.send_buffer_bytes = 4096;
  options.recv_buffer_bytes = 4096;
  options.send_hwm = 1;
  options.recv_hwm = 1;
  LocalExchange exchange(2);
  run_ranks(2, [&](int rank) {
    Mesh mesh = local_mesh(exchange, two_rank_spec(rank, 1, options));
    const auto deadline = deadline_after(30);
    // One direction at a time: with HWM 1 each way, queues hold only a couple of messages.
    Channel& channel = mesh.channel(1 - rank);
    for (int sender = 0; sender < 2; ++sender) {
      const auto payload = pattern(4 * kMiB + 3, sender);
      for (int i = 0; i < 3; ++i) {
        if (rank == sender) {
          channel.send(payload, deadline, "small-buf send");
        } else {
          ASSERT_TRUE(same_bytes(channel.recv(deadline, "small-buf recv").bytes(), payload));
        }
      }
    }
  });
}

}  // namespace
}  // namespace aiacc::net
