// HandshakeWatcher: adopts monitor endpoints, polls them, reports handshake failures.
#include "core/net/detail/handshake_watcher.h"

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/context.h"
#include "core/net/security.h"
#include "core/net/socket.h"

namespace aiacc::net::detail {

HandshakeWatcher::HandshakeWatcher(Context& context) : context_(context) {
  thread_ = std::thread([this] { run(); });
}

HandshakeWatcher::~HandshakeWatcher() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  try {
    wake_.notify();
  } catch (const std::exception&) {
    // The thread still sees stop_ within one poll interval.
  }
  thread_.join();
}

void HandshakeWatcher::watch(void* socket, const std::string& endpoint, bool bound) {
  static std::atomic<std::uint64_t> next{0};
  const std::string monitor_endpoint = fmt::format("inproc://aiacc-handshake-watch-{}", next++);
  // MONITOR_STOPPED too: it tells us when the socket closed or another monitor replaced ours
  // (libzmq sends it only when subscribed), so the reader is closed instead of kept forever.
  if (zmq_socket_monitor(socket, monitor_endpoint.c_str(),
                         handshake_failure_events() | ZMQ_EVENT_MONITOR_STOPPED) != 0) {
    throw CommError(fmt::format("zmq_socket_monitor on {} failed: {}", endpoint,
                                zmq_strerror(zmq_errno())));
  }
  std::unique_lock lock(mutex_);
  pending_.push_back({monitor_endpoint, {nullptr, endpoint, bound}});
  const std::uint64_t ticket = ++registered_;
  // Wake the thread and wait until its reader is connected: until then an event would block
  // the I/O thread publishing it (a PAIR without a peer).
  try {
    wake_.notify();
  } catch (const std::exception& e) {
    log::get("net")->warn("handshake watcher: wake-up failed: {}", e.what());
  }
  if (!adopted_.wait_for(lock, std::chrono::seconds(5), [&] { return adopted_count_ >= ticket; })) {
    log::get("net")->warn("handshake watcher: not listening on {} after 5 s", endpoint);
  }
}

void HandshakeWatcher::adopt_pending() {
  std::lock_guard lock(mutex_);
  for (auto& p : pending_) {
    void* monitor = zmq_socket(context_.handle(), ZMQ_PAIR);
    const int unbounded = 0;  // see Socket::open_monitor: a full pipe would stall the I/O thread
    if (monitor != nullptr &&
        zmq_setsockopt(monitor, ZMQ_RCVHWM, &unbounded, sizeof unbounded) == 0 &&
        zmq_connect(monitor, p.monitor_endpoint.c_str()) == 0) {
      p.watched.monitor = monitor;
      watched_.push_back(std::move(p.watched));
    } else {
      log::get("net")->warn("cannot watch handshakes on {}: {}", p.watched.endpoint,
                            zmq_strerror(zmq_errno()));
      if (monitor != nullptr) zmq_close(monitor);
    }
    ++adopted_count_;
  }
  pending_.clear();
  adopted_.notify_all();
}

void HandshakeWatcher::run() {
  std::vector<zmq_pollitem_t> items;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stop_) break;
    }
    adopt_pending();
    items.clear();
    items.push_back({nullptr, wake_.fd(), ZMQ_POLLIN, 0});
    for (const auto& w : watched_) items.push_back({w.monitor, 0, ZMQ_POLLIN, 0});
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 200) <= 0) continue;
    if (items[0].revents & ZMQ_POLLIN) wake_.clear();
    for (std::size_t i = 1; i < items.size(); ++i) {
      if ((items[i].revents & ZMQ_POLLIN) == 0) continue;
      Watched& watched = watched_[i - 1];
      const auto e = try_recv_monitor_event(watched.monitor);
      if (!e) continue;
      const int event = e->event;
      const std::uint32_t value = e->value;
      if (is_handshake_failure(event)) {
        context_.report_failed_handshake(watched.endpoint, watched.bound, event, value);
      } else if (event == ZMQ_EVENT_MONITOR_STOPPED) {
        zmq_close(watched.monitor);
        watched.monitor = nullptr;
      }
    }
    std::erase_if(watched_, [](const Watched& w) { return w.monitor == nullptr; });
  }
  for (auto& w : watched_) zmq_close(w.monitor);
  watched_.clear();
  adopt_pending();  // wake any registrant; sockets adopted now are closed below
  for (auto& w : watched_) zmq_close(w.monitor);
  watched_.clear();
}

}  // namespace aiacc::net::detail
