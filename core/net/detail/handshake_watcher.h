// HandshakeWatcher: one background thread per secured Context that reads the monitor events of
// every watched socket and reports refused handshakes to the context. One thread, not one per
// socket, because a job has tens of sockets and refusals are rare; it sleeps in zmq_poll and
// is woken through an eventfd when a socket is added or it must stop.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/net/wake_signal.h"

namespace aiacc::net {
class Context;
}

namespace aiacc::net::detail {

class HandshakeWatcher {
 public:
  explicit HandshakeWatcher(Context& context);
  // Stops the thread and closes its monitor sockets (before the context terminates).
  ~HandshakeWatcher();
  HandshakeWatcher(const HandshakeWatcher&) = delete;
  HandshakeWatcher& operator=(const HandshakeWatcher&) = delete;

  // Starts monitoring `socket` (called from the thread that owns it) and returns once the
  // watcher is listening, so no refusal after this call goes unseen.
  void watch(void* socket, const std::string& endpoint, bool bound);

 private:
  struct Watched {
    void* monitor = nullptr;  // our ZMQ_PAIR, connected to the socket's monitor endpoint
    std::string endpoint;     // the watched socket's endpoint, for the log
    bool bound = false;       // bound (refuses peers) or connecting (is refused)
  };
  void run();
  void adopt_pending();

  Context& context_;
  std::mutex mutex_;
  std::condition_variable adopted_;
  struct Pending {
    std::string monitor_endpoint;
    Watched watched;
  };
  std::vector<Pending> pending_;
  std::uint64_t registered_ = 0;  // guarded by mutex_
  std::uint64_t adopted_count_ = 0;
  bool stop_ = false;
  std::vector<Watched> watched_;  // owned by the thread
  WakeSignal wake_;  // watch() and the destructor wake the thread
  std::thread thread_;
};

}  // namespace aiacc::net::detail
