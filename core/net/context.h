// A ZeroMQ context (the I/O threads every socket of this process uses), owned through
// std::shared_ptr because it is genuinely shared: each Socket keeps its context alive, so a
// context can never be terminated while one of its sockets is open (zmq_ctx_term would hang).
//
// A context also carries the job's security: created with CURVE keys (security.h), every TCP or
// IPC socket made from it binds as a CURVE server and connects as a CURVE client with the job's
// keys, and every refused handshake on any of them is logged (rate-limited per endpoint) and
// counted, so an intruder is both kept out and seen.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/net/security.h"

namespace aiacc::net {

namespace detail {
class HandshakeWatcher;
}

// The open-file limit of this process: its soft RLIMIT_NOFILE, raised once (at the first call;
// Context::create makes it) to the hard limit, capped at 2^20.
int open_file_limit();

class Context {
 public:
  // `io_threads`: ZeroMQ background I/O threads. One moves ~3 GB/s over loopback TCP, which is
  // what one core sustains; more only help with many concurrent connections and spare cores.
  // `curve`: the job's keys, or nullopt for plain (unauthenticated, unencrypted) TCP.
  static std::shared_ptr<Context> create(int io_threads = 1,
                                         std::optional<CurveKeys> curve = std::nullopt);

  // Terminates the context. Blocks until lingering outgoing messages are sent or every socket's
  // linger time (ChannelOptions::linger_ms) has passed: bounded, never forever.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void* handle() const { return handle_; }
  const std::optional<CurveKeys>& curve() const { return curve_; }

  // Starts logging failed handshakes of `socket` (bound or connected on `endpoint`) through a
  // background watcher thread. Called by Socket for every secured bind and connect. A later
  // zmq_socket_monitor on the same socket (Channel's) replaces this one; its owner then passes
  // the events it reads to report_failed_handshake.
  void watch_handshakes(void* socket, const std::string& endpoint, bool bound);

  // Logs (at most once per endpoint every 10 s, with a count) one failed handshake: on a bound
  // socket a refused connection (counted), on a connecting one our own attempt.
  void report_failed_handshake(const std::string& endpoint, bool bound, int event,
                               std::uint32_t value);

  // Sockets this context may hold at once: as many as the process's open-file limit (raised to
  // its hard limit at the first context) allows, not ZeroMQ's default 1023.
  int max_sockets() const;

  // Connections refused so far by the bound sockets of this context.
  std::uint64_t refused_handshakes() const { return refused_.load(); }

 private:
  Context(void* handle, std::optional<CurveKeys> curve);
  void* handle_;
  std::optional<CurveKeys> curve_;
  std::atomic<std::uint64_t> refused_{0};
  std::mutex mutex_;  // guards watcher_ creation and last_logged_
  std::unique_ptr<detail::HandshakeWatcher> watcher_;
  struct RefusalLog {
    std::chrono::steady_clock::time_point last;
    std::uint64_t unlogged = 0;
  };
  std::map<std::string, RefusalLog> last_logged_;
};

}  // namespace aiacc::net
