// Context: creation with the I/O thread count and security, termination that retries EINTR,
// and the log of refused handshakes.
#include "core/net/context.h"

#include <zmq.h>

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "core/check.h"
#include "core/log.h"
#include "core/net/detail/handshake_watcher.h"

namespace aiacc::net {

// The open-file limit this process may use: the soft limit, raised once to the hard limit (as
// Go's runtime and many servers do). Every ZeroMQ socket holds at least one descriptor (its
// mailbox) and every TCP connection one more; a job of w ranks with K streams opens about
// 4 (w - 1) K of them per rank, past the 1024 soft limit many systems set.
int open_file_limit() {
  static const int limit = [] {
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 1024;
    if (files.rlim_cur < files.rlim_max) {
      rlimit raised = files;
      raised.rlim_cur = std::min<rlim_t>(files.rlim_max, rlim_t{1} << 20);
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
    }
    return static_cast<int>(std::min<rlim_t>(files.rlim_cur, rlim_t{1} << 20));
  }();
  return limit;
}

int Context::max_sockets() const { return zmq_ctx_get(handle_, ZMQ_MAX_SOCKETS); }

std::shared_ptr<Context> Context::create(int io_threads, std::optional<CurveKeys> curve) {
  AIACC_CHECK_GE(io_threads, 1);
  if (curve && zmq_has("curve") == 0) {
    throw CommError("this libzmq was built without CURVE support, so the job's traffic cannot be "
                    "authenticated; install a libzmq with libsodium, or set "
                    "cluster.security.curve: false on a trusted network");
  }
  void* handle = zmq_ctx_new();
  if (handle == nullptr) {
    ::aiacc::detail::throw_zmq_failure(__FILE__, __LINE__, "zmq_ctx_new()", zmq_errno());
  }
  try {
    AIACC_ZMQ_CHECK(zmq_ctx_set(handle, ZMQ_IO_THREADS, io_threads));
    // ZeroMQ allows 1023 sockets per context by default, whatever the descriptor limit: a
    // mesh of 5 ranks x 64 streams (a channel and its monitor per connection) ran out with
    // "Too many open files". Allow as many as descriptors (and libzmq's own ceiling) permit.
    const int ceiling = zmq_ctx_get(handle, ZMQ_SOCKET_LIMIT);
    const int wanted = std::max(zmq_ctx_get(handle, ZMQ_MAX_SOCKETS), open_file_limit());
    AIACC_ZMQ_CHECK(zmq_ctx_set(handle, ZMQ_MAX_SOCKETS, ceiling > 0 ? std::min(wanted, ceiling) : wanted));
  } catch (...) {
    zmq_ctx_term(handle);
    throw;
  }
  return std::shared_ptr<Context>(new Context(handle, std::move(curve)));
}

Context::Context(void* handle, std::optional<CurveKeys> curve)
    : handle_(handle), curve_(std::move(curve)) {}

Context::~Context() {
  // The watcher's monitor sockets belong to this context: they must close before termination.
  watcher_.reset();
  // zmq_ctx_term can be interrupted by a signal; it must then be called again.
  while (zmq_ctx_term(handle_) == -1) {
    if (zmq_errno() == EINTR) continue;
    log::get("net")->warn("zmq_ctx_term failed: {}", zmq_strerror(zmq_errno()));
    break;
  }
}

void Context::watch_handshakes(void* socket, const std::string& endpoint, bool bound) {
  detail::HandshakeWatcher* watcher = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!watcher_) watcher_ = std::make_unique<detail::HandshakeWatcher>(*this);
    watcher = watcher_.get();
  }
  watcher->watch(socket, endpoint, bound);
}

void Context::report_failed_handshake(const std::string& endpoint, bool bound, int event,
                                      std::uint32_t value) {
  if (bound) ++refused_;
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t earlier = 0;
  {
    std::lock_guard lock(mutex_);
    auto [it, first] = last_logged_.try_emplace(endpoint);
    // A refused peer reconnects every 100 ms: log the first failure, then one line per 10 s.
    if (!first && now - it->second.last < std::chrono::seconds(10)) {
      ++it->second.unlogged;
      return;
    }
    earlier = it->second.unlogged;
    it->second = {now, 0};
  }
  const std::string more =
      earlier > 0 ? fmt::format(" ({} more since the last report)", earlier) : "";
  if (bound) {
    log::get("net")->warn("refused a connection on {}: {}{}", endpoint,
                          describe_handshake_failure(event, value), more);
  } else {
    log::get("net")->warn("the handshake with {} failed ({}): it belongs to another job, or this "
                          "process lacks the job's token{}",
                          endpoint, describe_handshake_failure(event, value), more);
  }
}

}  // namespace aiacc::net
