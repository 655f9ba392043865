// RendezvousClient: request/reply over a DEALER socket and the polling waits built on it.
#include "core/net/rendezvous_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/net/detail/rendezvous_protocol.h"
#include "core/net/detail/wire.h"
#include "core/net/message.h"

namespace aiacc::net {

using detail::AbortKind;
using detail::RendezvousOp;
using detail::RendezvousStatus;
using detail::WireReader;
using detail::WireWriter;

namespace {

std::uint32_t op(RendezvousOp value) { return static_cast<std::uint32_t>(value); }

// Sleeps before the next poll of a not-yet-true condition: 1 ms doubling to 50 ms, so a fast
// start-up costs little and a slow one does not flood the server. Never past the deadline:
// false once it has passed (the caller then reports what is missing from its last poll).
bool backoff(std::chrono::milliseconds& delay, Deadline deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return false;
  std::this_thread::sleep_for(std::min<Clock::duration>(delay, left));
  delay = std::min(delay * 2, std::chrono::milliseconds(50));
  return Clock::now() < deadline;
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

// Ranks of 0..world-1 not in `present`.
std::vector<int> absent_ranks(int world, const std::set<int>& present) {
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!present.count(r)) missing.push_back(r);
  }
  return missing;
}

// The same, as "1, 4".
std::string missing_ranks(int world, const std::set<int>& present) {
  return fmt::format("{}", fmt::join(absent_ranks(world, present), ", "));
}

// "; the host 'NAME' does not resolve (...)" when the server's host is a name that does not
// resolve now, else "": a typo in MASTER_ADDR looks exactly like a rank 0 that never came.
// (Not checked up front: in a Kubernetes job rank 0's name may resolve only once its pod runs.)
std::string unresolved_host_hint(const std::string& server) {
  std::string host = server.substr(server.rfind("tcp://", 0) == 0 ? 6 : 0);
  host = host.substr(0, host.rfind(':'));
  if (host.empty()) return "";
  const Ipv4Resolution resolved = resolve_ipv4(host);
  return resolved.address.empty() ? fmt::format("; the host '{}' does not resolve ({})", host, resolved.error) : "";
}

}  // namespace

Ipv4Resolution resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found); error != 0) return {"", gai_strerror(error)};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  freeaddrinfo(found);
  return {text, ""};
}

bool is_loopback_ipv4(const std::string& address) {
  in_addr ipv4{};
  return inet_pton(AF_INET, address.c_str(), &ipv4) == 1 && (ntohl(ipv4.s_addr) >> 24) == 127;
}

RendezvousClient::RendezvousClient(std::shared_ptr<Context> context, std::string server)
    : socket_(std::move(context), ZMQ_DEALER, /*linger_ms=*/0),
      server_(server.rfind("tcp://", 0) == 0 ? std::move(server) : "tcp://" + server) {
  socket_.connect(server_);
}

std::string RendezvousClient::request(std::span<const std::byte> body, Deadline deadline,
                                      std::string_view what, bool* not_yet) {
  const auto start = Clock::now();
  const std::uint64_t sequence = ++sequence_;
  WireWriter header;
  header.u64(sequence);
  std::string frame(reinterpret_cast<const char*>(header.bytes().data()), header.bytes().size());
  frame.append(reinterpret_cast<const char*>(body.data()), body.size());
  const auto timed_out = [&] {
    // Under CURVE a token mismatch looks exactly like an absent server from here: say so.
    const char* hint = socket_.context()->curve()
                           ? " (is rank 0 running and reachable, and does this process hold the "
                             "same job token? a refused handshake is logged above)"
                           : " (is rank 0 running and reachable?)";
    return TimeoutError(fmt::format("timed out after {:.2f} s: no answer from the rendezvous "
                                    "server {} (rank 0's store){}{}, during: {}",
                                    seconds_since(start), server_, hint, unresolved_host_hint(server_), what));
  };
  for (;;) {
    if (zmq_send(socket_.handle(), frame.data(), frame.size(), ZMQ_DONTWAIT) >= 0) break;
    if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) socket_.fail("zmq_send(rendezvous)");
    const long timeout_ms = remaining_ms(deadline);
    if (timeout_ms == 0) throw timed_out();
    socket_.poll(ZMQ_POLLOUT, timeout_ms);
  }
  for (;;) {
    Message reply;
    if (zmq_msg_recv(reply.raw(), socket_.handle(), ZMQ_DONTWAIT) < 0) {
      if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) socket_.fail("zmq_msg_recv(rendezvous)");
      const long timeout_ms = remaining_ms(deadline);
      if (timeout_ms == 0) throw timed_out();
      socket_.poll(ZMQ_POLLIN, timeout_ms);
      continue;
    }
    WireReader reader(reply.bytes(), "rendezvous reply from " + server_);
    const std::uint64_t echoed = reader.u64();
    const auto status = static_cast<RendezvousStatus>(reader.u32());
    // A late reply to an earlier request that timed out: skip it. (The error reply to a
    // malformed request carries sequence 0: the server could not read ours.)
    if (echoed != sequence && !(echoed == 0 && status == RendezvousStatus::kError)) continue;
    if (status == RendezvousStatus::kError) {
      throw CommError(fmt::format("{} (rank {} during: {})", reader.str(), rank_, what));
    }
    if (status == RendezvousStatus::kAborted) {
      const auto kind = static_cast<AbortKind>(reader.u32());
      const std::string message = fmt::format("{} (rank {} during: {})", reader.str(), rank_, what);
      if (kind == AbortKind::kConfig) throw ConfigError(message);
      throw PeerFailedError(message);
    }
    if (not_yet) *not_yet = status == RendezvousStatus::kNotYet;
    const auto rest = reply.bytes().subspan(sizeof(std::uint64_t) + sizeof(std::uint32_t));
    return std::string(reinterpret_cast<const char*>(rest.data()), rest.size());
  }
}

void RendezvousClient::require_registered(std::string_view what) const {
  if (rank_ < 0) {
    throw CommError(fmt::format("rendezvous: {} before register_rank", what));
  }
}

void RendezvousClient::register_rank(int rank, int world_size,
                                     const std::vector<std::string>& addresses,
                                     Deadline deadline) {
  WireWriter body;
  body.u32(op(RendezvousOp::kRegister)).i32(rank).i32(world_size).strings(addresses);
  rank_ = rank;  // named in errors from here on
  world_size_ = world_size;
  request(body.bytes(), deadline, fmt::format("register rank {} of {}", rank, world_size));
}

AddressTable RendezvousClient::wait_all(Deadline deadline) {
  require_registered("wait_all");
  const auto start = Clock::now();
  auto delay = std::chrono::milliseconds(1);
  WireWriter body;
  body.u32(op(RendezvousOp::kTable));
  for (;;) {
    const std::string fields = request(body.bytes(), deadline, "wait for every rank to register");
    WireReader reader(as_bytes(fields), "rendezvous table from " + server_);
    reader.i32();  // world size: the server already checked ours against it
    const std::uint64_t count = reader.u64();
    AddressTable table(world_size_);
    std::set<int> present;
    for (std::uint64_t i = 0; i < count; ++i) {
      const int rank = reader.i32();
      auto addresses = reader.strings();
      if (rank >= 0 && rank < world_size_) {
        table[rank] = std::move(addresses);
        present.insert(rank);
      }
    }
    if (static_cast<int>(present.size()) == world_size_) return table;
    if (!backoff(delay, deadline)) {
      throw TimeoutError(fmt::format("rendezvous: rank {} timed out after {:.2f} s waiting for "
                                     "ranks to register; missing ranks: {} (of world size {})",
                                     rank_, seconds_since(start),
                                     missing_ranks(world_size_, present), world_size_));
    }
  }
}

void RendezvousClient::set(std::string_view key, std::span<const std::byte> value,
                           Deadline deadline) {
  WireWriter body;
  body.u32(op(RendezvousOp::kSet))
      .str(key)
      .str(std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
  request(body.bytes(), deadline, fmt::format("set key '{}'", key));
}

void RendezvousClient::set_string(std::string_view key, std::string_view value,
                                  Deadline deadline) {
  set(key, as_bytes(value), deadline);
}

std::string RendezvousClient::get_string(std::string_view key, Deadline deadline) {
  const auto start = Clock::now();
  auto delay = std::chrono::milliseconds(1);
  WireWriter body;
  body.u32(op(RendezvousOp::kGet)).str(key);
  for (;;) {
    bool not_yet = false;
    const std::string fields =
        request(body.bytes(), deadline, fmt::format("get key '{}'", key), &not_yet);
    if (!not_yet) {
      WireReader reader(as_bytes(fields), "rendezvous value from " + server_);
      return reader.str();
    }
    if (!backoff(delay, deadline)) {
      throw TimeoutError(fmt::format("rendezvous: rank {} timed out after {:.2f} s waiting for "
                                     "key '{}' to be set",
                                     rank_, seconds_since(start), key));
    }
  }
}

std::optional<std::string> RendezvousClient::lookup_string(std::string_view key, Deadline deadline) {
  WireWriter body;
  body.u32(op(RendezvousOp::kGet)).str(key);
  bool not_yet = false;
  const std::string fields = request(body.bytes(), deadline, fmt::format("look up key '{}'", key), &not_yet);
  if (not_yet) return std::nullopt;
  WireReader reader(as_bytes(fields), "rendezvous value from " + server_);
  return reader.str();
}

std::vector<std::byte> RendezvousClient::get(std::string_view key, Deadline deadline) {
  const std::string value = get_string(key, deadline);
  const auto bytes = as_bytes(value);
  return {bytes.begin(), bytes.end()};
}

void RendezvousClient::abort(std::string_view message, bool config_error, Deadline deadline) {
  require_registered("abort");
  WireWriter body;
  const AbortKind kind = config_error ? AbortKind::kConfig : AbortKind::kRuntime;
  body.u32(op(RendezvousOp::kAbort)).i32(rank_).u32(static_cast<std::uint32_t>(kind)).str(message);
  request(body.bytes(), deadline, "report this rank's failure");
}

void RendezvousClient::barrier(std::string_view name, Deadline deadline) {
  const auto start = Clock::now();
  const std::vector<int> missing = meet(name, deadline);
  if (!missing.empty()) {
    throw TimeoutError(fmt::format("rendezvous: rank {} timed out after {:.2f} s in barrier '{}'; missing ranks: {}",
                                   rank_, seconds_since(start), name, fmt::join(missing, ", ")));
  }
}

std::vector<int> RendezvousClient::meet(std::string_view name, Deadline deadline, int participants) {
  require_registered("barrier");
  if (participants < 0 || participants > world_size_) participants = world_size_;
  auto delay = std::chrono::milliseconds(1);
  WireWriter body;
  body.u32(op(RendezvousOp::kBarrier)).str(name).i32(rank_);
  for (;;) {
    const std::string fields =
        request(body.bytes(), deadline, fmt::format("barrier '{}'", name));
    WireReader reader(as_bytes(fields), "rendezvous barrier reply from " + server_);
    std::set<int> arrived;
    const std::uint64_t count = reader.u64();
    for (std::uint64_t i = 0; i < count; ++i) arrived.insert(reader.i32());
    std::vector<int> missing = absent_ranks(participants, arrived);
    if (missing.empty() || !backoff(delay, deadline)) return missing;
  }
}

}  // namespace aiacc::net
