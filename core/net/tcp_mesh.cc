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
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/security.h"

namespace aiacc::net {
namespace {

constexpr std::array<char, 8> kHelloMagic = {'A', 'I', 'A', 'C', 'C', 'T', 'L', '1'};
constexpr std::size_t kNonceChars = 64;   // generate_job_token(): 32 random bytes in hex
constexpr std::size_t kProofBytes = 32;   // keyed_hash(); zeros in a mesh without a hello key
constexpr std::size_t kHelloBytes = kHelloMagic.size() + 3 * sizeof(std::uint32_t) + kNonceChars + kProofBytes;
constexpr char kAccepted = 'A';
constexpr std::size_t kAnswerBytes = 1 + kProofBytes;  // kAccepted and the acceptor's proof
// Connections accepted whose hello has not arrived yet; more are refused at once, so a
// scanner cannot use up this process's file descriptors.
constexpr std::size_t kMaxPendingHellos = 64;

struct Hello {
  int from = -1, to = -1, stream = -1;
  std::string nonce;
  std::string proof;
};

// In a mesh with a hello key (plain TCP in a job with a token), hellos and answers carry a MAC
// of the link and the acceptor's nonce, as the mesh's own handshakes do: only the job's
// processes can make one, and one is good for one link of one mesh.
std::string link_proof(const Mesh& control, const char* kind, int from, int to, int stream, const std::string& nonce) {
  if (!control.hello_key()) return std::string(kProofBytes, '\0');
  return keyed_hash(*control.hello_key(), fmt::format("tcp-{}|{}|{}|{}|{}|{}", kind, from, to, stream, control.job(), nonce));
}

std::array<std::byte, kHelloBytes> encode_hello(const Hello& hello) {
  std::array<std::byte, kHelloBytes> out{};
  std::byte* p = out.data();
  std::memcpy(p, kHelloMagic.data(), kHelloMagic.size());
  p += kHelloMagic.size();
  for (int value : {hello.from, hello.to, hello.stream}) {
    const std::uint32_t le = htole32(static_cast<std::uint32_t>(value));
    std::memcpy(p, &le, sizeof le);
    p += sizeof le;
  }
  std::memcpy(p, hello.nonce.data(), std::min(hello.nonce.size(), kNonceChars));
  p += kNonceChars;
  std::memcpy(p, hello.proof.data(), std::min(hello.proof.size(), kProofBytes));
  return out;
}

// False if the bytes do not start with the magic (not one of ours).
bool decode_hello(const std::array<std::byte, kHelloBytes>& in, Hello& hello) {
  const std::byte* p = in.data();
  if (std::memcmp(p, kHelloMagic.data(), kHelloMagic.size()) != 0) return false;
  p += kHelloMagic.size();
  for (int* value : {&hello.from, &hello.to, &hello.stream}) {
    std::uint32_t le = 0;
    std::memcpy(&le, p, sizeof le);
    *value = static_cast<int>(le32toh(le));
    p += sizeof le;
  }
  hello.nonce.assign(reinterpret_cast<const char*>(p), kNonceChars);
  p += kNonceChars;
  hello.proof.assign(reinterpret_cast<const char*>(p), kProofBytes);
  return true;
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
  std::array<std::byte, kHelloBytes> bytes{};
  std::size_t got = 0;
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
  if (!higher.empty()) {
    std::string host, port;
    listener = listen_on(options, host, port);
    const std::string text = fmt::format("tcp {} {} {}", host, port, nonce);
    const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
    for (int peer : higher) control.channel(peer, 0).send({bytes, text.size()}, deadline, "tcp mesh: sending our address");
  }
  // 2. Connect to the lower peers; each stream's hello goes out at once.
  struct Outbound {
    int peer, stream;
    io::FileDescriptor fd;
    std::string endpoint, nonce, context;
  };
  std::vector<Outbound> outbound;
  for (int peer : lower) {
    const PeerAddress address =
        parse_peer_address(control.channel(peer, 0).recv(deadline, "tcp mesh: receiving a peer's address"), peer);
    for (int stream = 0; stream < streams; ++stream) {
      std::string context = fmt::format("tcp mesh: rank {} connecting to rank {} (stream {}) at {}:{}", rank, peer,
                                        stream, address.host, address.port);
      io::FileDescriptor fd = connect_to(address.host, address.port, options, deadline, context);
      const auto hello = encode_hello(
          {rank, peer, stream, address.nonce, link_proof(control, "hello", rank, peer, stream, address.nonce)});
      write_all(fd.get(), hello.data(), hello.size(), deadline, context);
      outbound.push_back({peer, stream, std::move(fd), address.host + ":" + address.port, address.nonce, std::move(context)});
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
  auto accept_hello = [&](PendingHello& connection) {
    Hello hello;
    if (!decode_hello(connection.bytes, hello)) return refuse(connection, "not an aiacc tcp hello");
    if (hello.to != rank || !same_mac(hello.nonce, nonce)) {
      return refuse(connection, fmt::format("a hello for rank {} of another mesh (claims rank {})", hello.to, hello.from));
    }
    if (!same_mac(hello.proof, link_proof(control, "hello", hello.from, rank, hello.stream, nonce))) {
      return refuse(connection, fmt::format("claims rank {} stream {} without the job token's proof", hello.from, hello.stream));
    }
    if (missing.erase({hello.from, hello.stream}) == 0) {
      return refuse(connection, fmt::format("rank {} stream {} is not expected here or already connected", hello.from, hello.stream));
    }
    std::array<std::byte, kAnswerBytes> answer{};
    answer[0] = static_cast<std::byte>(kAccepted);
    const std::string proof = link_proof(control, "accept", hello.from, rank, hello.stream, nonce);
    std::memcpy(answer.data() + 1, proof.data(), kProofBytes);
    write_all(connection.fd.get(), answer.data(), answer.size(), deadline,
              fmt::format("tcp mesh: rank {} confirming rank {} stream {}", rank, hello.from, hello.stream));
    links_.try_emplace({hello.from, hello.stream}, std::move(connection.fd), hello.from, hello.stream, connection.from,
                       spin_us_.get());
  };
  while (!missing.empty()) {
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (const auto& connection : pending) fds.push_back({connection.fd.get(), POLLIN, 0});
    const long timeout = remaining_ms(deadline);
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (ready < 0 && errno != EINTR) fail_errno("poll", "tcp mesh: accepting connections");
    if (ready == 0 && timeout == 0) {
      std::string list;
      for (const auto& [peer, stream] : missing) list += fmt::format("{}rank {} stream {}", list.empty() ? "" : ", ", peer, stream);
      throw TimeoutError(fmt::format("tcp mesh: rank {} timed out waiting for connections from: {}", rank, list));
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      PendingHello& connection = pending[i - 1];
      const ssize_t n = ::recv(connection.fd.get(), connection.bytes.data() + connection.got,
                               kHelloBytes - connection.got, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) {
        refuse(connection, "closed or failed before its hello");
        continue;
      }
      connection.got += static_cast<std::size_t>(n);
      if (connection.got == kHelloBytes) accept_hello(connection);
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
    PendingHello connection{std::move(fd), {}, 0, host + ":" + port};
    if (pending.size() >= kMaxPendingHellos) {
      refuse(connection, fmt::format("{} connections are already waiting for their hellos", pending.size()));
      continue;
    }
    configure(connection.fd.get(), fmt::format("tcp mesh: connection from {}", connection.from));
    pending.push_back(std::move(connection));
  }
  // 4. The lower peers' confirmations.
  for (Outbound& connection : outbound) {
    std::array<std::byte, kAnswerBytes> answer{};
    const bool answered = read_all(connection.fd.get(), answer.data(), answer.size(), deadline, connection.context);
    const std::string expected = link_proof(control, "accept", rank, connection.peer, connection.stream, connection.nonce);
    if (!answered || answer[0] != static_cast<std::byte>(kAccepted)) {
      throw CommError(fmt::format("tcp mesh: rank {} refused rank {}'s connection on stream {} (its log says why)",
                                  connection.peer, rank, connection.stream));
    }
    if (!same_mac({reinterpret_cast<const char*>(answer.data() + 1), kProofBytes}, expected)) {
      throw CommError(fmt::format("tcp mesh: the process answering as rank {} (stream {}, {}) lacks the job token's proof",
                                  connection.peer, connection.stream, connection.endpoint));
    }
    links_.try_emplace({connection.peer, connection.stream}, std::move(connection.fd), connection.peer,
                       connection.stream, connection.endpoint, spin_us_.get());
  }
}

TcpLink& TcpMesh::link(int peer, int stream) {
  const auto it = links_.find({peer, stream});
  if (it == links_.end()) throw InternalError(fmt::format("tcp mesh: no link to rank {} stream {}", peer, stream));
  return it->second;
}

}  // namespace aiacc::net
