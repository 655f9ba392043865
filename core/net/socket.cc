// Socket: checked wrappers around zmq_socket, setsockopt, bind, connect, poll and close.
#include "core/net/socket.h"

#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::net {


Socket::Socket(std::shared_ptr<Context> context, int type, int linger_ms)
    : context_(std::move(context)) {
  handle_ = zmq_socket(context_->handle(), type);
  if (handle_ == nullptr) fail("zmq_socket");
  set_int(ZMQ_LINGER, linger_ms, "ZMQ_LINGER");
}

Socket::Socket(Socket&& other) noexcept
    : context_(std::move(other.context_)),
      handle_(std::exchange(other.handle_, nullptr)),
      endpoint_(std::move(other.endpoint_)),
      bound_(other.bound_),
      monitored_(other.monitored_) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    context_ = std::move(other.context_);
    handle_ = std::exchange(other.handle_, nullptr);
    endpoint_ = std::move(other.endpoint_);
    bound_ = other.bound_;
    monitored_ = other.monitored_;
  }
  return *this;
}

void Socket::fail(const char* call) const {
  const int error = zmq_errno();
  // EMFILE comes from either limit; say both, with their values, so the user raises the right one.
  const std::string limits =
      error == EMFILE ? fmt::format(" (this process's limits: {} ZeroMQ sockets per context, {} open files; "
                                    "fewer ranks x cluster.ring.streams, or a higher `ulimit -n`)",
                                    context_ ? context_->max_sockets() : -1, open_file_limit())
                      : std::string();
  throw CommError(fmt::format("{} on {} failed: {} (errno {}){}", call, endpoint_,
                              zmq_strerror(error), error, limits));
}

void Socket::set_int(int option, int value, const char* option_name) {
  if (zmq_setsockopt(handle_, option, &value, sizeof value) != 0) {
    fail(fmt::format("zmq_setsockopt({}, {})", option_name, value).c_str());
  }
}

void Socket::set_int64(int option, std::int64_t value, const char* option_name) {
  if (zmq_setsockopt(handle_, option, &value, sizeof value) != 0) {
    fail(fmt::format("zmq_setsockopt({}, {})", option_name, value).c_str());
  }
}

void Socket::set_bytes(int option, std::string_view value, const char* option_name) {
  if (zmq_setsockopt(handle_, option, value.data(), value.size()) != 0) {
    fail(fmt::format("zmq_setsockopt({})", option_name).c_str());
  }
}

namespace {

// Only traffic that leaves the process is secured: inproc sockets are the process's own.
bool crosses_processes(const std::string& endpoint) {
  return endpoint.rfind("tcp://", 0) == 0 || endpoint.rfind("ipc://", 0) == 0;
}

}  // namespace

void Socket::set_key(int option, const CurveKey& key, const char* option_name) {
  set_bytes(option, std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
            option_name);
}

std::string Socket::bind(const std::string& endpoint) {
  endpoint_ = endpoint;
  const auto& curve = context_->curve();
  const bool secured = curve && crosses_processes(endpoint);
  if (secured) {
    set_int(ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER");
    set_key(ZMQ_CURVE_SECRETKEY, curve->server_secret, "ZMQ_CURVE_SECRETKEY");
  }
  if (zmq_bind(handle_, endpoint.c_str()) != 0) fail("zmq_bind");
  char actual[256];
  std::size_t size = sizeof actual;
  if (zmq_getsockopt(handle_, ZMQ_LAST_ENDPOINT, actual, &size) != 0) {
    fail("zmq_getsockopt(ZMQ_LAST_ENDPOINT)");
  }
  endpoint_ = actual;
  bound_ = true;
  if (secured) {
    context_->watch_handshakes(handle_, endpoint_, true);
    monitored_ = true;
  }
  return endpoint_;
}

void Socket::connect(const std::string& endpoint) {
  endpoint_ = endpoint;
  const auto& curve = context_->curve();
  const bool secured = curve && crosses_processes(endpoint);
  if (secured) {
    set_key(ZMQ_CURVE_SERVERKEY, curve->server_public, "ZMQ_CURVE_SERVERKEY");
    set_key(ZMQ_CURVE_PUBLICKEY, curve->client_public, "ZMQ_CURVE_PUBLICKEY");
    set_key(ZMQ_CURVE_SECRETKEY, curve->client_secret, "ZMQ_CURVE_SECRETKEY");
  }
  if (zmq_connect(handle_, endpoint.c_str()) != 0) fail("zmq_connect");
  if (secured) {
    context_->watch_handshakes(handle_, endpoint_, false);
    monitored_ = true;
  }
}

void Socket::monitor(const std::string& monitor_endpoint, int events) {
  if (zmq_socket_monitor(handle_, monitor_endpoint.c_str(), events) != 0) {
    fail("zmq_socket_monitor");
  }
  monitored_ = true;
}

Socket Socket::open_monitor(int events) {
  static std::atomic<std::uint64_t> next{0};
  const std::string endpoint = fmt::format("inproc://aiacc-monitor-{}", next++);
  monitor(endpoint, events);
  Socket reader(context_, ZMQ_PAIR, 0);
  // libzmq publishes monitor events with a blocking send from its I/O thread: a bounded pipe
  // that fills (events nobody has read yet, e.g. an intruder's connection attempts) would stall
  // every socket of the context. No receive limit makes the inproc pipe unbounded.
  reader.set_int(ZMQ_RCVHWM, 0, "ZMQ_RCVHWM");
  reader.connect(endpoint);
  return reader;
}

std::optional<MonitorEvent> try_recv_monitor_event(void* monitor) {
  // An event is two frames: (u16 event, u32 value), then the affected endpoint.
  zmq_msg_t frame;
  zmq_msg_init(&frame);
  if (zmq_msg_recv(&frame, monitor, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&frame);
    return std::nullopt;
  }
  MonitorEvent out;
  if (zmq_msg_size(&frame) >= 6) {
    std::uint16_t id = 0;
    std::memcpy(&id, zmq_msg_data(&frame), sizeof id);
    std::memcpy(&out.value, static_cast<const char*>(zmq_msg_data(&frame)) + sizeof id, sizeof out.value);
    out.event = id;
  }
  while (zmq_msg_more(&frame) && zmq_msg_recv(&frame, monitor, ZMQ_DONTWAIT) >= 0) {
  }
  zmq_msg_close(&frame);
  return out;
}

short Socket::poll(short events, long timeout_ms) {
  zmq_pollitem_t item{handle_, 0, events, 0};
  for (;;) {
    const int rc = zmq_poll(&item, 1, timeout_ms);
    if (rc >= 0) return rc == 0 ? 0 : item.revents;
    // A signal cut the wait short: the caller's loop recomputes the remaining time.
    if (zmq_errno() == EINTR) return 0;
    fail("zmq_poll");
  }
}

void Socket::close() noexcept {
  if (handle_ == nullptr) return;
  // Stop the monitor first: once its reader is gone, a late event (the disconnects of this
  // very close) would block the I/O thread that publishes it.
  if (monitored_) zmq_socket_monitor(handle_, nullptr, 0);
  zmq_close(handle_);  // only fails for an invalid handle, which ours never is
  handle_ = nullptr;
  context_.reset();
}

}  // namespace aiacc::net
