// TcpMesh: set-up of the plain TCP links through a connected Mesh (protocol in tcp_mesh.h).
#include "core/net/tcp_mesh.h"

#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/detail/hello.h"
#include "core/net/security.h"

namespace aiacc::net {
namespace {

constexpr std::size_t kNonceChars = 64;  // generate_job_token(): 32 random bytes in hex
// Handshake frames are a little-endian u32 length and an encoded detail::Hello (the ZeroMQ
// mesh's own handshake message); a longer frame is not ours.
constexpr std::uint32_t kMaxHandshakeBytes = 4096;
// Connections accepted whose hello has not arrived yet. Beyond this many the oldest is dropped,
// so a scanner can use up neither this process's file descriptors nor the table: refusing the
// newest instead let 64 idle connections shut every real peer out until the set-up deadline.
constexpr std::size_t kMaxPendingHellos = 64;

// What the handshakes name as the job: the mesh's job and the acceptor's nonce for this set-up,
// so a hello from another mesh, or another set-up of this one, does not match.
std::string tcp_job(const Mesh& control, const std::string& nonce) {
  return fmt::format("{}/tcp/{}", control.job(), nonce);
}

// In a mesh with a hello key (plain TCP in a job with a token), hellos and accepts carry the
// mesh's proof (detail::hello_proof): only the job's processes can make one.
std::string proof_for(const Mesh& control, detail::Hello::Kind kind, int from, int to, int stream,
                      const std::string& job, const std::string& nonce) {
  return control.hello_key() ? detail::hello_proof(*control.hello_key(), kind, from, to, stream, job, nonce) : "";
}

bool proof_holds(const Mesh& control, const detail::Hello& hello, const std::string& nonce) {
  return !control.hello_key() ||
         same_mac(hello.proof, proof_for(control, hello.kind, hello.from_rank, hello.to_rank, hello.stream, hello.job, nonce));
}

std::uint32_t frame_length(const std::byte* bytes) {
  std::uint32_t le = 0;
  std::memcpy(&le, bytes, sizeof le);
  return le32toh(le);
}

[[noreturn]] void fail_errno(const std::string& call, const std::string& context) {
  const int error = errno;
  throw CommError(fmt::format("{} failed: {} (errno {}), {}", call, std::strerror(error), error, context));
}

void set_option(int fd, int level, int option, int value, const char* name, const std::string& context) {
  if (::setsockopt(fd, level, option, &value, sizeof value) != 0) fail_errno(fmt::format("setsockopt({})", name), context);
}

// Kernel buffers as configured. Set before connect() or listen(): the window scale is agreed
// in the handshake, and shrinking the receive buffer afterwards left a 4 KiB-buffer connection
// trickling at one segment per delayed ACK (40 ms).
void set_buffers(int fd, const TcpMeshOptions& options, const std::string& context) {
  if (options.send_buffer_bytes > 0) {
    set_option(fd, SOL_SOCKET, SO_SNDBUF, static_cast<int>(options.send_buffer_bytes), "SO_SNDBUF", context);
  }
  if (options.recv_buffer_bytes > 0) {
    set_option(fd, SOL_SOCKET, SO_RCVBUF, static_cast<int>(options.recv_buffer_bytes), "SO_RCVBUF", context);
  }
}

// Non-blocking, no Nagle delay (every message is a complete unit).
void configure(int fd, const std::string& context) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) fail_errno("fcntl(O_NONBLOCK)", context);
  set_option(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", context);
}

// "host port" of a bound or connected socket's local (or remote) side, numeric.
std::pair<std::string, std::string> numeric_address(int fd, bool remote) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int rc = remote ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                        : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) return {"?", "?"};
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {"?", "?"};
  }
  return {host, port};
}

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head != nullptr) ::freeaddrinfo(head);
  }
};

void resolve_numeric(const std::string& host, const std::string& port, bool passive, AddressList& out,
                     const std::string& context) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &out.head);
  if (rc != 0 || out.head == nullptr) {
    throw ConfigError(fmt::format("{}: '{}' is not a numeric IP address ({})", context, host, ::gai_strerror(rc)));
  }
}

// Waits for `events` on `fd` until `deadline`: false on timeout, CommError if poll fails.
bool wait_fd(int fd, short events, Deadline deadline, const std::string& context) {
  for (;;) {
    const long timeout = remaining_ms(deadline);
    pollfd item{fd, events, 0};
    const int ready = ::poll(&item, 1, static_cast<int>(timeout));
    if (ready > 0) return true;
    if (ready == 0 && timeout == 0) return false;
    if (ready < 0 && errno != EINTR) fail_errno("poll", context);
  }
}

// Writes all of `bytes` on a non-blocking socket: TimeoutError at `deadline`, CommError if the
// connection fails.
void write_all(int fd, const std::byte* bytes, std::size_t size, Deadline deadline, const std::string& context) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, bytes + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline, context)) throw TimeoutError(fmt::format("{}: timed out sending", context));
    } else {
      fail_errno("send", context);
    }
  }
}

// Reads exactly `size` bytes: TimeoutError at `deadline`; false if the peer closes first.
bool read_all(int fd, std::byte* bytes, std::size_t size, Deadline deadline, const std::string& context) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, bytes + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      return false;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline, context)) throw TimeoutError(fmt::format("{}: timed out waiting", context));
    } else if (errno == ECONNRESET) {
      return false;
    } else {
      fail_errno("recv", context);
    }
  }
  return true;
}

void write_handshake(int fd, const detail::Hello& hello, Deadline deadline, const std::string& context) {
  const std::string body = detail::encode_hello(hello);
  const std::uint32_t length = htole32(static_cast<std::uint32_t>(body.size()));
  std::string frame(reinterpret_cast<const char*>(&length), sizeof length);
  frame += body;
  write_all(fd, reinterpret_cast<const std::byte*>(frame.data()), frame.size(), deadline, context);
}

// The answer to our hello; nullopt if the acceptor closed the connection (it refused).
std::optional<detail::Hello> read_handshake(int fd, Deadline deadline, const std::string& context) {
  std::array<std::byte, sizeof(std::uint32_t)> length{};
  if (!read_all(fd, length.data(), length.size(), deadline, context)) return std::nullopt;
  const std::uint32_t size = frame_length(length.data());
  if (size > kMaxHandshakeBytes) throw CommError(fmt::format("{}: a {}-byte answer is not an aiacc handshake", context, size));
  std::vector<std::byte> body(size);
  if (!read_all(fd, body.data(), body.size(), deadline, context)) return std::nullopt;
  return detail::decode_hello(body, context);
}

io::FileDescriptor listen_on(const TcpMeshOptions& options, std::string& host, std::string& port) {
  const std::string context = fmt::format("tcp mesh: listening on {}", options.interface);
  AddressList addresses;
  resolve_numeric(options.interface, "0", true, addresses, context);
  io::FileDescriptor fd(::socket(addresses.head->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) fail_errno("socket", context);
  set_buffers(fd.get(), options, context);  // accepted connections inherit them
  if (::bind(fd.get(), addresses.head->ai_addr, addresses.head->ai_addrlen) != 0) fail_errno("bind", context);
  if (::listen(fd.get(), SOMAXCONN) != 0) fail_errno("listen", context);
  std::tie(host, port) = numeric_address(fd.get(), false);
  return fd;
}

io::FileDescriptor connect_to(const std::string& host, const std::string& port, const TcpMeshOptions& options,
                              Deadline deadline, const std::string& context) {
  AddressList addresses;
  resolve_numeric(host, port, false, addresses, context);
  io::FileDescriptor fd(::socket(addresses.head->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail_errno("socket", context);
  set_buffers(fd.get(), options, context);
  configure(fd.get(), context);
  if (::connect(fd.get(), addresses.head->ai_addr, addresses.head->ai_addrlen) != 0 && errno != EINPROGRESS) {
    fail_errno("connect", context);
  }
  if (!wait_fd(fd.get(), POLLOUT, deadline, context)) {
    throw TimeoutError(fmt::format("{}: no connection before the deadline", context));
  }
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
  if (error != 0) {
    errno = error;
    fail_errno("connect", context);
  }
  return fd;
}

struct PeerAddress {
  std::string host, port, nonce;
};

PeerAddress parse_peer_address(const Message& message, int peer) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(message.bytes().data()), message.size()));
  std::string tag;
  PeerAddress address;
  if (!(in >> tag >> address.host >> address.port >> address.nonce) || tag != "tcp" ||
      address.nonce.size() != kNonceChars) {
    throw CommError(fmt::format("tcp mesh: rank {} sent a malformed address ({} bytes): a different aiacc "
                                "version or a foreign process",
                                peer, message.size()));
  }
  return address;
}

// A connection accepted but whose hello is not complete yet.
struct PendingHello {
  io::FileDescriptor fd;
  std::vector<std::byte> bytes;  // of the frame so far
  std::string from;  // remote address, for logs
};

}  // namespace

TcpMesh::TcpMesh(Mesh& control, const TcpMeshOptions& options, Deadline deadline)
    : spin_us_(std::make_unique<std::atomic<int>>(options.spin_us)) {
  const int rank = control.rank();
  const int streams = control.streams();
  std::vector<int> lower, higher;
  for (int peer : control.peers()) (peer < rank ? lower : higher).push_back(peer);

  // 1. Addresses and nonces, over the mesh.
  const std::string nonce = generate_job_token();
  io::FileDescriptor listener;
  std::string listening;  // "host:port", named when connections do not come
  if (!higher.empty()) {
    std::string host, port;
    listener = listen_on(options, host, port);
    listening = host + ":" + port;
    const std::string text = fmt::format("tcp {} {} {}", host, port, nonce);
    const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
    for (int peer : higher) control.channel(peer, 0).send({bytes, text.size()}, deadline, "tcp mesh: sending this rank's tcp address");
  }
  // 2. Connect to the lower peers; each stream's hello goes out at once.
  struct Outbound {
    int peer, stream;
    io::FileDescriptor fd;
    std::string endpoint, job, nonce, context;
  };
  std::vector<Outbound> outbound;
  // Links named as their owner names them (Mesh::stream_name), in their errors from now on.
  auto add_link = [&](int peer, int stream, io::FileDescriptor fd, const std::string& endpoint) {
    links_.try_emplace({peer, stream}, std::move(fd), peer, stream, endpoint, spin_us_.get())
        .first->second.set_stream_label(control.stream_name(peer, stream));
  };
  for (int peer : lower) {
    const PeerAddress address = parse_peer_address(
        control.channel(peer, 0).recv(deadline, fmt::format("tcp mesh: receiving rank {}'s tcp address", peer)), peer);
    for (int stream = 0; stream < streams; ++stream) {
      std::string context = fmt::format("tcp mesh: rank {} connecting to rank {} ({}) at {}:{}", rank, peer,
                                        control.stream_name(peer, stream), address.host, address.port);
      io::FileDescriptor fd = connect_to(address.host, address.port, options, deadline, context);
      const std::string job = tcp_job(control, address.nonce);
      write_handshake(fd.get(),
                      {detail::Hello::kHello, rank, peer, stream, job, "",
                       proof_for(control, detail::Hello::kHello, rank, peer, stream, job, address.nonce)},
                      deadline, context);
      outbound.push_back({peer, stream, std::move(fd), address.host + ":" + address.port, job, address.nonce,
                          std::move(context)});
    }
  }
  // 3. Accept the higher peers' connections.
  std::set<std::pair<int, int>> missing;
  for (int peer : higher) {
    for (int stream = 0; stream < streams; ++stream) missing.insert({peer, stream});
  }
  std::vector<PendingHello> pending;
  auto refuse = [&](PendingHello& connection, const std::string& why) {
    log::get("net")->warn("tcp mesh: rank {} refused a connection from {}: {}", rank, connection.from, why);
    connection.fd = io::FileDescriptor();
  };
  const std::string job = tcp_job(control, nonce);
  auto accept_hello = [&](PendingHello& connection) {
    const std::span<const std::byte> body(connection.bytes.data() + sizeof(std::uint32_t),
                                          connection.bytes.size() - sizeof(std::uint32_t));
    detail::Hello hello;
    try {
      hello = detail::decode_hello(body, connection.from);
    } catch (const CommError& e) {
      return refuse(connection, e.what());
    }
    if (hello.kind != detail::Hello::kHello || hello.to_rank != rank || !same_mac(hello.job, job)) {
      return refuse(connection, fmt::format("a hello for rank {} of another mesh (claims rank {})", hello.to_rank, hello.from_rank));
    }
    if (!proof_holds(control, hello, nonce)) {
      return refuse(connection, fmt::format("claims rank {} stream {} without the job token's proof", hello.from_rank, hello.stream));
    }
    if (missing.erase({hello.from_rank, hello.stream}) == 0) {
      return refuse(connection, fmt::format("rank {} stream {} is not expected here or already connected", hello.from_rank, hello.stream));
    }
    write_handshake(connection.fd.get(),
                    {detail::Hello::kAccept, rank, hello.from_rank, hello.stream, job, "",
                     proof_for(control, detail::Hello::kAccept, rank, hello.from_rank, hello.stream, job, nonce)},
                    deadline, fmt::format("tcp mesh: rank {} confirming rank {} ({})", rank, hello.from_rank,
                                          control.stream_name(hello.from_rank, hello.stream)));
    add_link(hello.from_rank, hello.stream, std::move(connection.fd), connection.from);
  };
  while (!missing.empty()) {
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (const auto& connection : pending) fds.push_back({connection.fd.get(), POLLIN, 0});
    const long timeout = remaining_ms(deadline);
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (ready < 0 && errno != EINTR) fail_errno("poll", "tcp mesh: accepting connections");
    if (ready == 0 && timeout == 0) {
      std::string list;
      for (const auto& [peer, stream] : missing) {
        list += fmt::format("{}rank {} ({})", list.empty() ? "" : ", ", peer, control.stream_name(peer, stream));
      }
      throw TimeoutError(
          fmt::format("tcp mesh: rank {} timed out waiting on {} for connections from: {}", rank, listening, list));
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      PendingHello& connection = pending[i - 1];
      // The frame's length first, then as much of the frame as it announced.
      const std::size_t have = connection.bytes.size();
      const std::size_t want = have < sizeof(std::uint32_t)
                                   ? sizeof(std::uint32_t)
                                   : sizeof(std::uint32_t) + frame_length(connection.bytes.data());
      connection.bytes.resize(want);
      const ssize_t n = ::recv(connection.fd.get(), connection.bytes.data() + have, want - have, MSG_DONTWAIT);
      connection.bytes.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) {
        refuse(connection, "closed or failed before its hello");
      } else if (connection.bytes.size() == sizeof(std::uint32_t) &&
                 frame_length(connection.bytes.data()) > kMaxHandshakeBytes) {
        refuse(connection, "not an aiacc tcp hello");
      } else if (connection.bytes.size() > sizeof(std::uint32_t) &&
                 connection.bytes.size() == sizeof(std::uint32_t) + frame_length(connection.bytes.data())) {
        accept_hello(connection);
      }
    }
    std::erase_if(pending, [](const PendingHello& connection) { return !connection.fd.valid(); });
    if ((fds[0].revents & POLLIN) == 0) continue;
    io::FileDescriptor fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      const int error = errno;
      if (error == EMFILE || error == ENFILE) {
        // Out of descriptors: drop the oldest unproven connection, or give up if none.
        if (pending.empty()) fail_errno("accept", "tcp mesh: accepting connections");
        refuse(pending.front(), "dropped: this process ran out of file descriptors");
        pending.erase(pending.begin());
      } else if (error != EAGAIN && error != EWOULDBLOCK && error != EINTR && error != ECONNABORTED) {
        fail_errno("accept", "tcp mesh: accepting connections");
      }
      continue;
    }
    const auto [host, port] = numeric_address(fd.get(), true);
    PendingHello connection{std::move(fd), {}, host + ":" + port};
    if (pending.size() >= kMaxPendingHellos) {
      refuse(pending.front(), fmt::format("dropped: {} connections were waiting for their hellos and it had "
                                          "waited longest", pending.size()));
      pending.erase(pending.begin());
    }
    configure(connection.fd.get(), fmt::format("tcp mesh: connection from {}", connection.from));
    pending.push_back(std::move(connection));
  }
  // 4. The lower peers' confirmations.
  for (Outbound& connection : outbound) {
    const auto answer = read_handshake(connection.fd.get(), deadline, connection.context);
    if (!answer) {
      throw CommError(fmt::format("tcp mesh: rank {} refused rank {}'s connection ({}; connected to {}): its log says why",
                                  connection.peer, rank, control.stream_name(connection.peer, connection.stream),
                                  connection.endpoint));
    }
    if (answer->kind != detail::Hello::kAccept || answer->from_rank != connection.peer || answer->to_rank != rank ||
        answer->stream != connection.stream || answer->job != connection.job || !proof_holds(control, *answer, connection.nonce)) {
      throw CommError(fmt::format("tcp mesh: the process answering as rank {} ({}; connected to {}) is not that "
                                  "rank of this mesh or lacks the job token's proof",
                                  connection.peer, control.stream_name(connection.peer, connection.stream),
                                  connection.endpoint));
    }
    add_link(connection.peer, connection.stream, std::move(connection.fd), connection.endpoint);
  }
}

TcpLink& TcpMesh::link(int peer, int stream) {
  const auto it = links_.find({peer, stream});
  if (it == links_.end()) throw InternalError(fmt::format("tcp mesh: no link to rank {} stream {}", peer, stream));
  return it->second;
}

}  // namespace aiacc::net
