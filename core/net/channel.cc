// Channel: deadline-bounded send/recv over a ZMQ_PAIR socket, copying or zero-copy sends.
#include "core/net/channel.h"

#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/peer_timeout_error.h"
#include "core/net/security.h"

namespace aiacc::net {

// Counts zero-copy frames ZeroMQ still holds. ZeroMQ calls release() from its I/O thread when
// it no longer reads a frame's buffer; send() waits for the count to reach zero before it lets
// the caller reuse the buffers. Notifying under the lock keeps the waiter from destroying the
// tracker while release() still touches it.
class Channel::ZeroCopyTracker {
 public:
  static void release(void* /*data*/, void* hint) {
    auto* self = static_cast<ZeroCopyTracker*>(hint);
    std::lock_guard lock(self->mutex_);
    --self->pending_;
    self->released_.notify_all();
  }
  void add() {
    std::lock_guard lock(mutex_);
    ++pending_;
  }
  bool idle() {
    std::lock_guard lock(mutex_);
    return pending_ == 0;
  }
  bool wait_until(Deadline deadline) {
    std::unique_lock lock(mutex_);
    return released_.wait_until(lock, deadline, [&] { return pending_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  int pending_ = 0;
};

namespace {

// Owns a zmq_msg_t being sent until zmq_msg_send takes it (a failed send leaves it ours).
struct OutgoingFrame {
  zmq_msg_t msg;
  OutgoingFrame() { zmq_msg_init(&msg); }
  ~OutgoingFrame() { zmq_msg_close(&msg); }
};

}  // namespace

Socket Channel::make_socket(std::shared_ptr<Context> context, const ChannelOptions& options) {
  Socket socket(std::move(context), ZMQ_PAIR, options.linger_ms);
  socket.set_int(ZMQ_SNDHWM, options.send_hwm, "ZMQ_SNDHWM");
  socket.set_int(ZMQ_RCVHWM, options.recv_hwm, "ZMQ_RCVHWM");
  // Gradient buckets can be hundreds of MiB: no message size limit (-1 is also zmq's default,
  // set explicitly so a changed default cannot silently cap us).
  socket.set_int64(ZMQ_MAXMSGSIZE, -1, "ZMQ_MAXMSGSIZE");
  if (options.send_buffer_bytes > 0) {
    socket.set_int(ZMQ_SNDBUF, static_cast<int>(options.send_buffer_bytes), "ZMQ_SNDBUF");
  }
  if (options.recv_buffer_bytes > 0) {
    socket.set_int(ZMQ_RCVBUF, static_cast<int>(options.recv_buffer_bytes), "ZMQ_RCVBUF");
  }
  return socket;
}

Channel::Channel(Socket socket, int peer, int stream, const ChannelOptions& options)
    : socket_(std::move(socket)),
      peer_(peer),
      stream_(stream),
      zero_copy_min_bytes_(options.zero_copy_min_bytes) {
  // Accepted connections and handshake failures are watched on every channel, secured or not:
  // they tell an intruder's disconnect from the peer's (drain_monitor). This monitor replaces
  // the handshake watcher's (a socket has one), so it also takes over reporting refusals.
  monitor_ = socket_.open_monitor(ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                  handshake_failure_events());
}

Channel::Channel(Channel&&) noexcept = default;
Channel& Channel::operator=(Channel&&) noexcept = default;
Channel::~Channel() { abandon_posted(); }

void Channel::drain_monitor() {
  while (const auto event = try_recv_monitor_event(monitor_.handle())) {
    if (is_handshake_failure(event->event)) {
      socket_.context()->report_failed_handshake(socket_.endpoint(), socket_.is_bound(),
                                                 event->event, event->value);
      ++refused_disconnects_due_;
    } else if (event->event == ZMQ_EVENT_ACCEPTED) {
      foreign_connections_.insert(event->value);  // the value is the connection's fd
    } else if (event->event == ZMQ_EVENT_DISCONNECTED) {
      const bool refused = refused_disconnects_due_ > 0;
      if (refused) --refused_disconnects_due_;
      if (foreign_connections_.erase(event->value) == 0 && !refused) peer_gone_ = true;
    }
  }
}

std::string Channel::describe(short event) const {
  // A bound socket's endpoint is this rank's own address, not the peer's: say which it is.
  return fmt::format("{} rank {} ({}; {} {})", event == ZMQ_POLLOUT ? "send to" : "recv from", peer_, stream_name(),
                     socket_.is_bound() ? "accepted on this rank's" : "connected to", socket_.endpoint());
}

void Channel::require_open(std::string_view what) const {
  if (!socket_.is_open()) {
    throw CommError(fmt::format("channel to rank {} ({}) is closed, during: {}", peer_,
                                stream_name(), what));
  }
}

void Channel::fail(const char* call, std::string_view what) const {
  const int error = zmq_errno();
  throw CommError(fmt::format("{} failed: {} (errno {}), peer rank {} ({}; {} {}), during: {}",
                              call, zmq_strerror(error), error, peer_, stream_name(),
                              socket_.is_bound() ? "accepted on this rank's" : "connected to", socket_.endpoint(), what));
}

void Channel::wait_for(short event, Deadline deadline, std::string_view what,
                       Clock::time_point start) {
  for (;;) {
    if (peer_gone_) {
      // What the peer sent before it went is delivered first; the short grace covers ZeroMQ
      // reporting the disconnect just before handing over the last frames it read.
      if (socket_.poll(event, 20) & event) return;
      throw CommError(fmt::format("peer disconnected after {:.2f} s: {} (its process died or "
                                  "closed the connection): {}",
                                  seconds_since(start), describe(event), what));
    }
    const long timeout_ms = remaining_ms(deadline);
    if (timeout_ms == 0) {
      throw PeerTimeoutError(fmt::format("timed out after {:.2f} s: {}: {}", seconds_since(start),
                                         describe(event), what),
                             peer_);
    }
    zmq_pollitem_t items[2] = {{socket_.handle(), 0, event, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, timeout_ms) < 0) {
      if (zmq_errno() == EINTR) continue;
      fail("zmq_poll", what);
    }
    if (items[0].revents & event) return;
    if (items[1].revents & ZMQ_POLLIN) drain_monitor();
  }
}

void Channel::send_frame(zmq_msg_t* msg, bool more, Deadline deadline, std::string_view what,
                         Clock::time_point start) {
  const int flags = ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0);
  for (;;) {
    if (zmq_msg_send(msg, socket_.handle(), flags) >= 0) return;
    const int error = zmq_errno();
    if (error == EAGAIN) {
      wait_for(ZMQ_POLLOUT, deadline, what, start);
    } else if (error != EINTR) {
      fail("zmq_msg_send", what);
    }
  }
}

void Channel::send(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) {
  const std::span<const std::byte> parts[] = {bytes};
  send_parts(parts, deadline, what);
}

void Channel::send_parts(std::span<const std::span<const std::byte>> parts, Deadline deadline,
                         std::string_view what) {
  require_open(what);
  const auto start = Clock::now();
  ZeroCopyTracker tracker;
  std::exception_ptr error;
  try {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto part = parts[i];
      OutgoingFrame frame;
      const bool zero_copy = zero_copy_min_bytes_ >= 0 &&
                             static_cast<std::int64_t>(part.size()) >= zero_copy_min_bytes_;
      if (zero_copy) {
        // ZeroMQ never writes through this pointer; the const_cast only satisfies its C API.
        tracker.add();
        if (zmq_msg_init_data(&frame.msg, const_cast<std::byte*>(part.data()), part.size(),
                              &ZeroCopyTracker::release, &tracker) != 0) {
          ZeroCopyTracker::release(nullptr, &tracker);  // ZeroMQ did not take it
          fail("zmq_msg_init_data", what);
        }
      } else {
        if (zmq_msg_init_size(&frame.msg, part.size()) != 0) fail("zmq_msg_init_size", what);
        if (!part.empty()) std::memcpy(zmq_msg_data(&frame.msg), part.data(), part.size());
      }
      const bool more = i + 1 < parts.size();
      try {
        send_frame(&frame.msg, more, deadline, what, start);
      } catch (...) {
        // ZeroMQ queues a multipart message only whole; a failure after its first part leaves
        // the stream unusable, so close the channel rather than let the peer misparse it.
        if (i > 0) abandon();
        throw;
      }
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (!tracker.wait_until(deadline)) {
    // ZeroMQ still reads the caller's buffers. Closing with LINGER 0 makes it drop them; we
    // must not return (letting the caller free the buffers) before it has.
    abandon();
    if (!tracker.wait_until(Clock::now() + std::chrono::seconds(30))) {
      log::get("net")->critical("ZeroMQ kept a zero-copy buffer for rank {} past close: {}",
                                peer_, what);
      std::terminate();
    }
    if (!error) {
      error = std::make_exception_ptr(PeerTimeoutError(
          fmt::format("timed out after {:.2f} s waiting for the transport to release a "
                      "zero-copy buffer: {}: {}",
                      seconds_since(start), describe(ZMQ_POLLOUT), what),
          peer_));
    }
  }
  if (error) std::rethrow_exception(error);
}

void Channel::post(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) {
  require_open(what);
  const auto start = Clock::now();
  OutgoingFrame frame;
  const bool zero_copy = zero_copy_min_bytes_ >= 0 &&
                         static_cast<std::int64_t>(bytes.size()) >= zero_copy_min_bytes_;
  if (zero_copy) {
    if (!posted_) posted_ = std::make_unique<ZeroCopyTracker>();
    posted_->add();
    if (zmq_msg_init_data(&frame.msg, const_cast<std::byte*>(bytes.data()), bytes.size(),
                          &ZeroCopyTracker::release, posted_.get()) != 0) {
      ZeroCopyTracker::release(nullptr, posted_.get());
      fail("zmq_msg_init_data", what);
    }
  } else {
    if (zmq_msg_init_size(&frame.msg, bytes.size()) != 0) fail("zmq_msg_init_size", what);
    if (!bytes.empty()) std::memcpy(zmq_msg_data(&frame.msg), bytes.data(), bytes.size());
  }
  // A failed send leaves the frame ours: OutgoingFrame closes it, which releases the buffer.
  send_frame(&frame.msg, false, deadline, what, start);
}

void Channel::wait_posted(Deadline deadline, std::string_view what) {
  if (!posted_) return;
  const auto start = Clock::now();
  if (posted_->wait_until(deadline)) return;
  abandon_posted();
  throw PeerTimeoutError(fmt::format("timed out after {:.2f} s waiting for the transport to send "
                                     "posted buffers: {}: {}",
                                     seconds_since(start), describe(ZMQ_POLLOUT), what),
                         peer_);
}

void Channel::abandon_posted() noexcept {
  if (!posted_ || posted_->idle()) return;
  abandon();
  if (!posted_->wait_until(Clock::now() + std::chrono::seconds(30))) {
    log::get("net")->critical("ZeroMQ kept posted buffers for rank {} past close", peer_);
    std::terminate();
  }
}

void Channel::abandon() noexcept {
  if (!socket_.is_open()) return;
  // LINGER 0: ZeroMQ drops (and releases) whatever it still holds for this socket at once.
  int zero = 0;
  zmq_setsockopt(socket_.handle(), ZMQ_LINGER, &zero, sizeof zero);
  socket_.close();
  monitor_.close();
}

void Channel::recv_frame(Message& message, Deadline deadline, std::string_view what,
                         Clock::time_point start) {
  for (;;) {
    if (zmq_msg_recv(message.raw(), socket_.handle(), ZMQ_DONTWAIT) >= 0) return;
    const int error = zmq_errno();
    if (error == EAGAIN) {
      wait_for(ZMQ_POLLIN, deadline, what, start);
    } else if (error != EINTR) {
      fail("zmq_msg_recv", what);
    }
  }
}

std::vector<Message> Channel::recv_parts(Deadline deadline, std::string_view what) {
  require_open(what);
  const auto start = Clock::now();
  std::vector<Message> parts;
  do {
    parts.emplace_back();
    // Later frames of a multipart message are already here (delivered atomically).
    recv_frame(parts.back(), deadline, what, start);
  } while (zmq_msg_more(parts.back().raw()));
  return parts;
}

Message Channel::recv(Deadline deadline, std::string_view what) {
  std::vector<Message> parts = recv_parts(deadline, what);
  if (parts.size() != 1) {
    throw CommError(fmt::format("expected a single-frame message from rank {} ({}), got "
                                "{} frames, during: {}",
                                peer_, stream_name(), parts.size(), what));
  }
  return std::move(parts.front());
}

}  // namespace aiacc::net
