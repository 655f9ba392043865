// Single-process pieces of core/net: control-message encoding (truncation and foreign data are
// CommErrors, never out-of-bounds reads), mesh address entries, deadlines, and the options'
// config schema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "core/net/channel_options.h"
#include "core/net/deadline.h"
#include "core/net/detail/hello.h"
#include "core/net/detail/wire.h"
#include "core/net/mesh.h"
#include "core/net/message.h"

namespace aiacc::net {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> as_bytes(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

TEST(Wire, RoundTripsFields) {
  detail::WireWriter writer;
  writer.u32(7).i32(-3).u64(1ull << 40).str("key").strings({"a", "", "ccc"});
  detail::WireReader reader(writer.bytes(), "test");
  EXPECT_EQ(reader.u32(), 7u);
  EXPECT_EQ(reader.i32(), -3);
  EXPECT_EQ(reader.u64(), 1ull << 40);
  EXPECT_EQ(reader.str(), "key");
  EXPECT_EQ(reader.strings(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_NO_THROW(reader.finish());
}

TEST(Wire, TruncatedInputIsACommErrorNamingTheSource) {
  detail::WireWriter writer;
  writer.str("a long enough string");
  auto bytes = writer.bytes().first(10);
  detail::WireReader reader(bytes, "reply from rank 3");
  try {
    reader.str();
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("reply from rank 3"));
    EXPECT_THAT(e.what(), HasSubstr("truncated"));
  }
}

TEST(Wire, HugeLengthPrefixDoesNotAllocateOrOverread) {
  detail::WireWriter writer;
  writer.u64(~0ull);  // a string "length" far beyond the buffer
  detail::WireReader reader(writer.bytes(), "junk");
  EXPECT_THROW(reader.str(), CommError);
  detail::WireReader list_reader(writer.bytes(), "junk");
  EXPECT_THROW(list_reader.strings(), CommError);
}

TEST(Hello, RoundTripsAndRejectsForeignBytes) {
  detail::Hello hello{detail::Hello::kReject, 2, 0, 3, "job-x", "because", std::string(32, '\x07')};
  const detail::Hello back = detail::decode_hello(as_bytes(detail::encode_hello(hello)), "peer");
  EXPECT_EQ(back.kind, detail::Hello::kReject);
  EXPECT_EQ(back.from_rank, 2);
  EXPECT_EQ(back.to_rank, 0);
  EXPECT_EQ(back.stream, 3);
  EXPECT_EQ(back.job, "job-x");
  EXPECT_EQ(back.reason, "because");
  EXPECT_EQ(back.proof, std::string(32, '\x07'));
  EXPECT_THROW(detail::decode_hello(as_bytes("GET / HTTP/1.1\r\n\r\n"), "peer"), CommError);
}

TEST(MeshAddress, Parses) {
  int peer = -1;
  int stream = -1;
  std::string endpoint;
  ASSERT_TRUE(parse_mesh_address("3:1=tcp://127.0.0.1:4000", peer, stream, endpoint));
  EXPECT_EQ(peer, 3);
  EXPECT_EQ(stream, 1);
  EXPECT_EQ(endpoint, "tcp://127.0.0.1:4000");
  EXPECT_FALSE(parse_mesh_address("tcp://127.0.0.1:4000", peer, stream, endpoint));
  EXPECT_FALSE(parse_mesh_address("x:1=tcp://h:1", peer, stream, endpoint));
  EXPECT_FALSE(parse_mesh_address("1:1=", peer, stream, endpoint));
}

TEST(Deadline, RemainingMsRoundsUpAndClamps) {
  EXPECT_EQ(remaining_ms(deadline_after(-1.0)), 0);
  const long ms = remaining_ms(deadline_after(0.0004));
  EXPECT_TRUE(ms == 0 || ms == 1) << ms;
  EXPECT_LE(remaining_ms(deadline_after(10.0), 100), 100);
  EXPECT_GE(remaining_ms(deadline_after(10.0)), 9000);
}

TEST(ChannelOptions, ReferenceListsEveryKnobWithItsDoc) {
  const std::string text = config::write(ChannelOptions{}, config::Writer::Mode::reference);
  for (const char* key : {"connect_timeout_s", "send_buffer_bytes", "recv_buffer_bytes",
                          "send_hwm", "recv_hwm", "linger_ms", "zero_copy_min_bytes"}) {
    EXPECT_THAT(text, HasSubstr(key));
  }
}

TEST(Message, MovesOwnershipAndKeepsBytes) {
  for (const std::size_t size : {std::size_t{5}, std::size_t{100000}}) {  // inline and heap
    Message message;
    EXPECT_TRUE(message.empty());
    ASSERT_EQ(zmq_msg_init_size(message.raw(), size), 0);
    for (std::size_t i = 0; i < size; ++i) message.mutable_bytes()[i] = std::byte(i * 7);
    Message moved = std::move(message);
    EXPECT_EQ(message.size(), 0u);  // NOLINT(bugprone-use-after-move): documented empty
    ASSERT_EQ(moved.size(), size);
    for (std::size_t i = 0; i < size; ++i) ASSERT_EQ(moved.bytes()[i], std::byte(i * 7));
    Message assigned;
    assigned = std::move(moved);
    EXPECT_EQ(assigned.size(), size);
    EXPECT_EQ(assigned.bytes()[size - 1], std::byte((size - 1) * 7));
  }
}

}  // namespace
}  // namespace aiacc::net
