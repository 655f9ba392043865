// Socket: a move-only RAII ZeroMQ socket. Every libzmq call is checked; a failure throws
// CommError naming the call, the socket's endpoint and zmq's reason. Closing sets no new
// linger: the linger chosen at creation bounds how long the context keeps unsent messages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/net/context.h"
#include "core/net/security.h"

namespace aiacc::net {

class Socket {
 public:
  Socket() = default;  // empty: only destruction and move-assignment are valid
  // A socket of ZeroMQ `type` (ZMQ_PAIR, ZMQ_ROUTER, ...) with the given linger (ms, >= 0).
  Socket(std::shared_ptr<Context> context, int type, int linger_ms);
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void set_int(int option, int value, const char* option_name);
  void set_int64(int option, std::int64_t value, const char* option_name);
  void set_bytes(int option, std::string_view value, const char* option_name);
  void set_key(int option, const CurveKey& key, const char* option_name);

  // Binds to `endpoint` (port `*` or 0 lets the OS choose) and returns the endpoint actually
  // bound, e.g. "tcp://127.0.0.1:41234", which also becomes endpoint(). With a secured context
  // a tcp/ipc socket binds as a CURVE server with the job's key; connect() then connects as a
  // CURVE client naming it. Either way refused handshakes are logged (Context).
  std::string bind(const std::string& endpoint);
  // Starts connecting (asynchronous: returns before the peer accepts; ZeroMQ retries).
  void connect(const std::string& endpoint);

  // Waits for `events` (ZMQ_POLLIN/ZMQ_POLLOUT) for at most `timeout_ms`; returns the events
  // that are ready (0 on timeout). Retries EINTR.
  short poll(short events, long timeout_ms);

  // Throws CommError "<call> on <endpoint> failed: <zmq reason>" for zmq's current errno.
  [[noreturn]] void fail(const char* call) const;

  // Closes now (idempotent, never throws). Unsent messages stay with the context for at most
  // the linger time.
  void close() noexcept;

  // Starts publishing `events` (ZMQ_EVENT_*) on the inproc endpoint `monitor_endpoint`; read
  // them with a ZMQ_PAIR socket connected there.
  void monitor(const std::string& monitor_endpoint, int events);
  // The same on a fresh endpoint; returns the ZMQ_PAIR connected to it (read it with
  // try_recv_monitor_event). A socket has one monitor: this replaces any earlier one. Keep the
  // reader alive until this socket is closed (declare it before the socket), and read it
  // regularly: events wait in memory until read.
  Socket open_monitor(int events);

  bool is_open() const { return handle_ != nullptr; }
  const std::shared_ptr<Context>& context() const { return context_; }
  void* handle() const { return handle_; }
  const std::string& endpoint() const { return endpoint_; }
  bool is_bound() const { return bound_; }  // bound (accepts peers) rather than connected

 private:
  std::shared_ptr<Context> context_;  // keeps zmq_ctx_term from running while we are open
  void* handle_ = nullptr;
  std::string endpoint_ = "(unbound)";
  bool bound_ = false;
  bool monitored_ = false;  // a zmq_socket_monitor is active: close() stops it first
};

// One ZeroMQ monitor event: ZMQ_EVENT_* and its value (an fd, an errno, a protocol error).
struct MonitorEvent {
  int event = 0;
  std::uint32_t value = 0;
};

// The next event waiting on a monitor PAIR socket (raw handle), or nullopt when none is.
std::optional<MonitorEvent> try_recv_monitor_event(void* monitor);

}  // namespace aiacc::net
