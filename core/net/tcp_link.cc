// TcpLink: length-prefixed messages over a non-blocking TCP socket, progressed by the waits of
// the thread that uses it.
#include "core/net/tcp_link.h"

#include <endian.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/net/peer_timeout_error.h"

namespace aiacc::net {
namespace {

constexpr std::size_t kHeaderBytes = sizeof(std::uint64_t);
// Larger lengths can only come from a corrupt or foreign stream (a 1 TiB gradient bucket is
// not a thing); refusing them beats trying to allocate them.
constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 40;
// sendmsg gathers this many pieces at most per call (header and body of several messages).
constexpr std::size_t kMaxIovecs = 64;

// This thread's links with queued sends: every wait on the thread moves them on.
thread_local std::vector<TcpLink*> t_sending;

// Errors that mean the peer or the path to it is gone (reported as "disconnected").
bool is_disconnect(int error) {
  switch (error) {
    case EPIPE: case ECONNRESET: case ENOTCONN: case ECONNABORTED: case ETIMEDOUT:
    case EHOSTUNREACH: case ENETUNREACH: case EHOSTDOWN: case ENETDOWN:
      return true;
    default:
      return false;
  }
}

}  // namespace

TcpLink::TcpLink(io::FileDescriptor socket, int peer, int stream, std::string endpoint,
                 const std::atomic<int>* spin_us)
    : socket_(std::move(socket)), peer_(peer), stream_(stream), endpoint_(std::move(endpoint)), spin_us_(spin_us) {}

TcpLink::~TcpLink() { abandon_posted(); }

std::string TcpLink::describe(short event) const {
  return fmt::format("{} rank {} ({}; tcp {})", event == POLLOUT ? "send to" : "recv from", peer_, stream_name(),
                     endpoint_);
}

void TcpLink::require_open(std::string_view what) const {
  if (!socket_.valid()) {
    throw CommError(fmt::format("tcp link to rank {} ({}) is closed, during: {}", peer_, stream_name(), what));
  }
}

void TcpLink::fail(const char* call, int error, std::string_view what) {
  close();  // a failed call may have moved part of a message: nothing after it can be trusted
  throw CommError(fmt::format("{} failed: {} (errno {}), peer rank {} ({}; tcp {}), during: {}", call,
                              std::strerror(error), error, peer_, stream_name(), endpoint_, what));
}

void TcpLink::enlist() noexcept {
  if (sending_list_ != nullptr) return;
  t_sending.push_back(this);
  sending_list_ = &t_sending;
}

void TcpLink::delist() noexcept {
  if (sending_list_ == nullptr) return;
  // The list of the thread that posted (the contract keeps other threads off this link while
  // it is enlisted; this only guards a destructor that runs elsewhere after that thread ended
  // its collective abnormally).
  std::erase(*sending_list_, this);
  sending_list_ = nullptr;
}

void TcpLink::close() noexcept {
  queue_.clear();
  delist();
  socket_ = io::FileDescriptor();
}

void TcpLink::abandon_posted() noexcept {
  if (queue_.empty()) {
    delist();
    return;
  }
  // The peer cannot tell where a cut message ends; closing makes its next recv fail cleanly.
  close();
}

bool TcpLink::flush(std::string_view what) {
  while (!queue_.empty()) {
    iovec pieces[kMaxIovecs];
    std::size_t count = 0;
    for (auto it = queue_.begin(); it != queue_.end() && count + 2 <= kMaxIovecs; ++it) {
      if (it->written < kHeaderBytes) {
        pieces[count++] = {reinterpret_cast<char*>(&it->header) + it->written, kHeaderBytes - it->written};
        if (it->size > 0) pieces[count++] = {const_cast<std::byte*>(it->data), it->size};
      } else {
        const std::size_t done = it->written - kHeaderBytes;
        pieces[count++] = {const_cast<std::byte*>(it->data) + done, it->size - done};
      }
    }
    msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = count;
    const ssize_t sent = ::sendmsg(socket_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return false;
      if (is_disconnect(error)) {
        close();
        throw CommError(fmt::format("peer disconnected: {} (its process died or closed the connection): {}",
                                    describe(POLLOUT), what));
      }
      fail("sendmsg", error, what);
    }
    auto left = static_cast<std::size_t>(sent);
    while (left > 0) {
      Outgoing& front = queue_.front();
      const std::size_t step = std::min(left, kHeaderBytes + front.size - front.written);
      front.written += step;
      left -= step;
      if (front.written == kHeaderBytes + front.size) queue_.pop_front();
    }
  }
  delist();
  return true;
}

void TcpLink::wait_for(short event, Deadline deadline, std::string_view what, Clock::time_point start) {
  const int spin = spin_us_ != nullptr ? spin_us_->load(std::memory_order_relaxed) : 0;
  const auto spin_end = Clock::now() + std::chrono::microseconds(spin);
  // Reused between waits (no allocation per message); wait_for never nests.
  thread_local std::vector<pollfd> fds;
  thread_local std::vector<TcpLink*> others;
  for (;;) {
    fds.clear();
    others.clear();
    const short own = static_cast<short>(event | (queue_.empty() ? 0 : POLLOUT));
    fds.push_back({socket_.get(), own, 0});
    for (TcpLink* link : t_sending) {
      if (link == this) continue;
      fds.push_back({link->socket_.get(), POLLOUT, 0});
      others.push_back(link);
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw PeerTimeoutError(
          fmt::format("timed out after {:.2f} s: {}: {}", seconds_since(start), describe(event), what), peer_);
    }
    const int timeout_ms = now < spin_end ? 0 : static_cast<int>(remaining_ms(deadline));
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("poll", errno, what);
    }
    if (ready == 0) continue;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) others[i - 1]->flush(what);
    }
    const short got = fds[0].revents;
    if ((got & POLLOUT) != 0 && !queue_.empty()) flush(what);
    // Errors and hang-ups also wake us: the caller's read or write then reports them.
    if ((got & (event | POLLERR | POLLHUP)) != 0) return;
  }
}

void TcpLink::post(std::span<const std::byte> bytes, Deadline /*deadline*/, std::string_view what) {
  require_open(what);
  queue_.push_back({htole64(static_cast<std::uint64_t>(bytes.size())), bytes.data(), bytes.size(), 0});
  if (!flush(what)) enlist();
}

void TcpLink::wait_posted(Deadline deadline, std::string_view what) {
  if (queue_.empty()) return;
  const auto start = Clock::now();
  try {
    while (!flush(what)) wait_for(POLLOUT, deadline, what, start);
  } catch (...) {
    abandon_posted();  // the caller may free its buffers once we throw
    throw;
  }
}

void TcpLink::send(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) {
  post(bytes, deadline, what);  // a failing post leaves nothing queued (the link is closed)
  wait_posted(deadline, what);
}

void TcpLink::read_exact(std::byte* out, std::size_t size, Deadline deadline, std::string_view what,
                         Clock::time_point start, std::size_t& consumed) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(socket_.get(), out + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      consumed += static_cast<std::size_t>(n);
      continue;
    }
    const int error = n == 0 ? ECONNRESET : errno;
    if (error == EINTR) continue;
    if (error == EAGAIN || error == EWOULDBLOCK) {
      wait_for(POLLIN, deadline, what, start);
      continue;
    }
    if (is_disconnect(error)) {
      close();
      throw CommError(fmt::format("peer disconnected after {:.2f} s: {} (its process died or closed the "
                                  "connection): {}",
                                  seconds_since(start), describe(POLLIN), what));
    }
    fail("recv", error, what);
  }
}

template <class ReadBody>
auto TcpLink::receive(Deadline deadline, std::string_view what, ReadBody&& read_body) {
  require_open(what);
  const auto start = Clock::now();
  std::size_t consumed = 0;  // of this message, header included
  try {
    std::uint64_t header = 0;
    read_exact(reinterpret_cast<std::byte*>(&header), kHeaderBytes, deadline, what, start, consumed);
    return read_body(le64toh(header), start, consumed);
  } catch (...) {
    // Inside a message, the position of the next one is lost: nothing after it can be trusted.
    if (consumed > 0) close();
    throw;
  }
}

Message TcpLink::recv(Deadline deadline, std::string_view what) {
  return receive(deadline, what, [&](std::uint64_t size, Clock::time_point start, std::size_t& consumed) {
    if (size > kMaxMessageBytes) {
      throw CommError(fmt::format("a message of {} bytes announced: {}: the stream is corrupt or not from "
                                  "aiacc, during: {}",
                                  size, describe(POLLIN), what));
    }
    Message message;
    zmq_msg_close(message.raw());
    if (zmq_msg_init_size(message.raw(), static_cast<std::size_t>(size)) != 0) {
      zmq_msg_init(message.raw());
      throw CommError(fmt::format("cannot allocate {} bytes for a message: {}: {}", size, describe(POLLIN), what));
    }
    read_exact(message.mutable_bytes().data(), message.size(), deadline, what, start, consumed);
    return message;
  });
}

void TcpLink::recv_into(std::span<std::byte> out, Deadline deadline, std::string_view what) {
  receive(deadline, what, [&](std::uint64_t size, Clock::time_point start, std::size_t& consumed) {
    if (size != out.size()) throw_size_mismatch(static_cast<std::size_t>(size), out.size(), what);
    read_exact(out.data(), out.size(), deadline, what, start, consumed);
  });
}

}  // namespace aiacc::net
