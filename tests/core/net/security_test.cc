// Job security: tokens (generation, validation, token files), CURVE key derivation, and
// admission: processes with the job's token form meshes and reach the rendezvous store over
// CURVE; a process without it (no CURVE, or another token) gets no message through, times out,
// and is counted and logged as refused by the process it tried.
#include <cstdlib>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/net/mesh.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/net/security.h"
#include "tests/core/net/net_fixture.h"
#include "tests/testing/run_ranks.h"
#include "tests/testing/scoped_env.h"

namespace aiacc::net {
namespace {

using aiacc::testing::fast_options;
using aiacc::testing::LocalExchange;
using aiacc::testing::run_ranks;
using aiacc::testing::ScopedEnv;
using ::testing::HasSubstr;

const std::string kToken = "0123456789abcdef-job-token-for-tests";
const std::string kOtherToken = "fedcba9876543210-another-jobs-token";

bool eventually(const std::function<bool()>& condition, double seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

TEST(JobToken, GeneratedTokensAreLongHexAndDistinct) {
  const std::string a = generate_job_token();
  const std::string b = generate_job_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_NO_THROW(check_job_token(a, "generated"));
}

TEST(JobToken, ShortOrOddTokensAreRefusedNamingTheirSource) {
  try {
    check_job_token("short", "AIACC_JOB_TOKEN");
    FAIL() << "a 5-character token was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("AIACC_JOB_TOKEN"));
    EXPECT_THAT(e.what(), HasSubstr("at least 32"));
  }
  EXPECT_THROW(check_job_token("0123456789abcdef0123456789abcde", "x"), ConfigError);  // 31
  EXPECT_NO_THROW(check_job_token("0123456789abcdef0123456789abcdef", "x"));
  EXPECT_THROW(check_job_token("0123456789abcdef 0123456789abcdef", "x"), ConfigError);
  EXPECT_THROW(check_job_token(std::string("0123456789abcdef0123456789abcdef\n"), "x"), ConfigError);
}

class TokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("aiacc-token-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& text, mode_t mode) {
    std::ofstream(path_) << text;
    ::chmod(path_.c_str(), mode);
  }
  std::filesystem::path path_;
};

TEST_F(TokenFile, ReadsTheFirstLineTrimmed) {
  write("  " + kToken + " \nsecond line\n", 0600);
  EXPECT_EQ(read_job_token_file(path_), kToken);
}

// A Secret made from a token file hands AIACC_JOB_TOKEN the whole file: the variable gives the
// token the file gives (its first line, trimmed), or pods refuse what ranks elsewhere accept.
TEST_F(TokenFile, TheEnvironmentVariableHoldingTheFileGivesTheFilesToken) {
  const std::string text = "  " + kToken + " \t\r\nsecond line\n";
  write(text, 0600);
  const auto from_environment = [&] {
    const ScopedEnv secret("AIACC_JOB_TOKEN", text);
    return job_token_from_environment("");
  }();
  ASSERT_TRUE(from_environment.has_value());
  EXPECT_EQ(*from_environment, read_job_token_file(path_));
  EXPECT_EQ(*from_environment, kToken);
}

TEST_F(TokenFile, RefusesAFileOtherUsersCanRead) {
  write(kToken + "\n", 0644);
  try {
    read_job_token_file(path_);
    FAIL() << "a world-readable token file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cluster.security.token_file"));
    EXPECT_THAT(e.what(), HasSubstr("chmod 600"));
  }
}

TEST_F(TokenFile, RefusesASymbolicLink) {
  const auto target = path_.string() + ".target";
  std::ofstream(target) << kToken << "\n";
  ::chmod(target.c_str(), 0600);
  std::filesystem::create_symlink(target, path_);
  // It said "cannot open ...: Too many levels of symbolic links" (O_NOFOLLOW's ELOOP).
  try {
    read_job_token_file(path_);
    ADD_FAILURE() << "a symbolic link was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cluster.security.token_file: '" + path_.string() +
                                    "' is a symbolic link; the job token file must be a regular "
                                    "file (give the file it points to)"));
    EXPECT_THAT(e.what(), HasSubstr(target));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("Too many levels")));
  }
  std::filesystem::remove(target);
}

TEST_F(TokenFile, MissingOrEmptyFilesAreConfigErrors) {
  EXPECT_THROW(read_job_token_file(path_), ConfigError);
  write("", 0600);
  EXPECT_THROW(read_job_token_file(path_), ConfigError);
}

TEST(CurveKeys, TheServerKeyIsAFunctionOfTheTokenAndClientKeysAreFresh) {
  const auto a = CurveKeys::from_token(kToken);
  const auto b = CurveKeys::from_token(kToken);
  const auto other = CurveKeys::from_token(kOtherToken);
  EXPECT_EQ(a.server_public, b.server_public);
  EXPECT_EQ(a.server_secret, b.server_secret);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.server_public, other.server_public);
  EXPECT_NE(a.fingerprint(), other.fingerprint());
  EXPECT_NE(a.client_public, b.client_public);
  // The derived public key is the Curve25519 public key of the derived secret, as ZeroMQ
  // computes it (so a CURVE server with only the secret agrees with our clients).
  char z85_public[41], z85_secret[41];
  ASSERT_NE(zmq_z85_encode(z85_secret, a.server_secret.data(), 32), nullptr);
  ASSERT_EQ(zmq_curve_public(z85_public, z85_secret), 0);
  CurveKey decoded{};
  ASSERT_NE(zmq_z85_decode(decoded.data(), z85_public), nullptr);
  EXPECT_EQ(decoded, a.server_public);
}

std::shared_ptr<Context> context_with(const std::string& token) {
  return token.empty() ? Context::create() : Context::create(1, CurveKeys::from_token(token));
}

MeshSpec spec_for(int rank, int world) { return aiacc::testing::mesh_spec(rank, world, 2); }

TEST(SecuredMesh, RanksWithTheTokenExchangeDataOverCurve) {
  constexpr int kWorld = 3;
  LocalExchange exchange(kWorld);
  run_ranks(kWorld, [&](int rank) {
    auto context = context_with(kToken);
    MeshListener listener(context, spec_for(rank, kWorld));
    auto table = exchange.exchange(rank, listener.addresses());
    Mesh mesh(std::move(listener), table, deadline_after(10));
    const auto deadline = deadline_after(10);
    for (int peer : mesh.peers()) {
      for (int s = 0; s < mesh.streams(); ++s) {
        const auto payload = aiacc::testing::pattern(300000, 100 * rank + 10 * peer + s);
        mesh.channel(peer, s).send(payload, deadline, "secured send");
      }
    }
    for (int peer : mesh.peers()) {
      for (int s = 0; s < mesh.streams(); ++s) {
        Message message = mesh.channel(peer, s).recv(deadline, "secured recv");
        EXPECT_TRUE(aiacc::testing::same_bytes(
            message.bytes(), aiacc::testing::pattern(300000, 100 * peer + 10 * rank + s)));
      }
    }
    EXPECT_EQ(context->refused_handshakes(), 0u);
  });
}

// Rank 1 has `intruder_token` ("" = no CURVE): it can never complete a channel to rank 0, both
// time out, and rank 0 (which binds for rank 1) counts the refusals.
void expect_mesh_refuses(const std::string& intruder_token) {
  LocalExchange exchange(2);
  std::uint64_t refused_by_rank0 = 0;
  run_ranks(2, [&](int rank) {
    auto context = context_with(rank == 0 ? kToken : intruder_token);
    auto spec = spec_for(rank, 2);
    MeshListener listener(context, spec);
    auto table = exchange.exchange(rank, listener.addresses());
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(Mesh(std::move(listener), table, deadline_after(3)), TimeoutError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
    if (rank == 0) refused_by_rank0 = context->refused_handshakes();
  });
  EXPECT_GT(refused_by_rank0, 0u);
}

TEST(SecuredMesh, APeerWithoutCurveCannotJoin) { expect_mesh_refuses(""); }

TEST(SecuredMesh, APeerWithAnotherTokenCannotJoin) { expect_mesh_refuses(kOtherToken); }

// Intruders connect to rank 0's channel endpoint after the mesh is up and send a frame that
// would be a valid message: what arrives is rank 1's message only, and the channel stays up
// (their connections' ends are not mistaken for rank 1's). `token` empty: plain TCP, where an
// intruder's handshake succeeds and only the descriptor tells its connection apart.
void expect_intruders_change_nothing(const std::string& token) {
  LocalExchange exchange(2);
  std::vector<std::string> rank0_addresses;
  std::mutex mutex;
  std::atomic<bool> checked{false};  // rank 1 keeps its end open until rank 0 has checked
  run_ranks(2, [&](int rank) {
    auto context = context_with(token);
    MeshSpec spec = spec_for(rank, 2);
    spec.streams = 1;
    MeshListener listener(context, spec);
    if (rank == 0) {
      std::lock_guard lock(mutex);
      rank0_addresses = listener.addresses();
    }
    auto table = exchange.exchange(rank, listener.addresses());
    Mesh mesh(std::move(listener), table, deadline_after(10));
    if (rank == 0) {
      int peer = 0, stream = 0;
      std::string endpoint;
      ASSERT_TRUE(parse_mesh_address(rank0_addresses.at(0), peer, stream, endpoint));
      auto plain_context = context_with("");
      auto foreign_context = context_with(kOtherToken);
      const char forged[] = "forged";
      for (int attempt = 0; attempt < 3; ++attempt) {  // connect, send, go away; three times
        Socket plain(plain_context, ZMQ_PAIR, 0);
        Socket foreign(foreign_context, ZMQ_PAIR, 0);
        plain.connect(endpoint);
        foreign.connect(endpoint);
        zmq_send(plain.handle(), forged, sizeof forged, ZMQ_DONTWAIT);
        zmq_send(foreign.handle(), forged, sizeof forged, ZMQ_DONTWAIT);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      Message message = mesh.channel(1).recv(deadline_after(10), "genuine recv");
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(message.bytes().data()), message.size()),
                "genuine");
      // The channel reads its monitor while it waits: short receives drive it.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
      while (std::chrono::steady_clock::now() < until) {
        try {
          mesh.channel(1).recv(deadline_after(0.05), "probe");
          ADD_FAILURE() << "a second message arrived";
        } catch (const TimeoutError&) {
        }
      }
      if (!token.empty()) {
        EXPECT_GE(context->refused_handshakes(), 2u);
      }
      checked = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const std::string genuine = "genuine";
      mesh.channel(0).send(std::as_bytes(std::span(genuine)), deadline_after(10), "genuine send");
      EXPECT_TRUE(eventually([&] { return checked.load(); }, 20));
    }
  });
}

TEST(SecuredMesh, IntrudersOnAnEstablishedChannelGetNothingThroughNorBreakIt) {
  expect_intruders_change_nothing(kToken);
}

TEST(PlainMesh, IntrudersOnAnEstablishedChannelDoNotBreakIt) { expect_intruders_change_nothing(""); }

// A connection accepted while the mesh is being set up (before the channel watches its socket)
// that stays silent and closes afterwards ends its handshake then: its disconnect must not be
// taken for the peer's, or every later wait on the channel fails with "peer disconnected".
TEST(SecuredMesh, AnIntruderFromTheSetUpLeavingLaterIsNotThePeerLeaving) {
  LocalExchange exchange(2);
  std::atomic<bool> intruder_gone{false};
  run_ranks(2, [&](int rank) {
    auto context = context_with(kToken);
    MeshSpec spec = spec_for(rank, 2);
    spec.streams = 1;
    MeshListener listener(context, spec);
    io::FileDescriptor intruder;
    if (rank == 0) {
      int peer = 0, stream = 0;
      std::string endpoint;
      ASSERT_TRUE(parse_mesh_address(listener.addresses().at(0), peer, stream, endpoint));
      const auto colon = endpoint.rfind(':');
      const int port = std::stoi(endpoint.substr(colon + 1));
      intruder = io::FileDescriptor(::socket(AF_INET, SOCK_STREAM, 0));
      sockaddr_in target{};
      target.sin_family = AF_INET;
      target.sin_port = htons(static_cast<std::uint16_t>(port));
      target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(::connect(intruder.get(), reinterpret_cast<sockaddr*>(&target), sizeof target), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted, handshake pending
    }
    auto table = exchange.exchange(rank, listener.addresses());
    Mesh mesh(std::move(listener), table, deadline_after(10));
    if (rank == 0) {
      intruder = io::FileDescriptor();  // closed: now its handshake fails and it disconnects
      intruder_gone = true;
      // Waits far longer than the grace a peer's disconnect gets (20 ms) until rank 1 sends.
      Message message = mesh.channel(1).recv(deadline_after(10), "genuine recv");
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(message.bytes().data()), message.size()), "genuine");
    } else {
      EXPECT_TRUE(eventually([&] { return intruder_gone.load(); }, 20));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const std::string genuine = "genuine";
      mesh.channel(0).send(std::as_bytes(std::span(genuine)), deadline_after(10), "genuine send");
    }
  });
}

// Plain TCP meshes whose handshakes prove the token (MeshSpec::hello_key), as the dense ring
// runs with cluster.security.encrypt_ring off.
CurveKey hello_key_of(const std::string& token) { return CurveKeys::from_token(token).hello_key; }

TEST(ProvenMesh, RanksWithTheTokenConnectOverPlainTcp) {
  constexpr int kWorld = 3;
  LocalExchange exchange(kWorld);
  run_ranks(kWorld, [&](int rank) {
    auto spec = spec_for(rank, kWorld);
    spec.hello_key = hello_key_of(kToken);
    MeshListener listener(Context::create(), spec);
    auto table = exchange.exchange(rank, listener.addresses());
    Mesh mesh(std::move(listener), table, deadline_after(10));
    const auto deadline = deadline_after(10);
    for (int peer : mesh.peers()) {
      const int from = rank;
      mesh.channel(peer, 1).send(std::as_bytes(std::span(&from, 1)), deadline, "proven send");
    }
    for (int peer : mesh.peers()) {
      Message message = mesh.channel(peer, 1).recv(deadline, "proven recv");
      int from = -1;
      ASSERT_EQ(message.size(), sizeof from);
      std::memcpy(&from, message.bytes().data(), sizeof from);
      EXPECT_EQ(from, peer);
    }
  });
}

void expect_proven_mesh_refuses(const std::optional<CurveKey>& intruder_key) {
  LocalExchange exchange(2);
  std::string rank0_error;
  std::uint64_t refused_by_rank0 = 0;
  run_ranks(2, [&](int rank) {
    auto context = Context::create();
    auto spec = spec_for(rank, 2);
    spec.hello_key = rank == 0 ? std::optional(hello_key_of(kToken)) : intruder_key;
    MeshListener listener(context, spec);
    auto table = exchange.exchange(rank, listener.addresses());
    try {
      Mesh mesh(std::move(listener), table, deadline_after(3));
      ADD_FAILURE() << "rank " << rank << " formed a mesh with a process without the token";
    } catch (const CommError& e) {
      if (rank == 0) rank0_error = e.what();
    }
    if (rank == 0) refused_by_rank0 = context->refused_handshakes();
  });
  EXPECT_THAT(rank0_error, HasSubstr("does not prove this job's token"));
  EXPECT_GE(refused_by_rank0, 1u);
}

TEST(ProvenMesh, APeerWithAnotherTokenCannotJoin) { expect_proven_mesh_refuses(hello_key_of(kOtherToken)); }

TEST(ProvenMesh, APeerWithoutProofsCannotJoin) { expect_proven_mesh_refuses(std::nullopt); }

TEST(SecuredRendezvous, OnlyProcessesWithTheTokenCanRegister) {
  auto server_context = context_with(kToken);
  RendezvousServer server(server_context, "127.0.0.1", 0);
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  for (const std::string& intruder : {std::string(), kOtherToken}) {
    RendezvousClient client(context_with(intruder), address);
    try {
      client.register_rank(0, 1, {}, deadline_after(1.5));
      FAIL() << "a process without the token registered";
    } catch (const TimeoutError&) {
    }
  }
  EXPECT_TRUE(eventually([&] { return server_context->refused_handshakes() >= 2; }));
  RendezvousClient member(context_with(kToken), address);
  member.register_rank(0, 1, {}, deadline_after(10));
  EXPECT_EQ(member.wait_all(deadline_after(10)).size(), 1u);
}

}  // namespace
}  // namespace aiacc::net
