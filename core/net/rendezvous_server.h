// RendezvousServer: the small store on rank 0 through which ranks find each other (DESIGN §6).
// It records each rank's addresses, a key-value map (start-up checks such as the config-hash
// exchange) and barrier arrivals, and answers RendezvousClient requests from a background
// thread. A duplicate rank, a world-size disagreement or a rank out of range breaks the job:
// every later request from any rank gets that CommError, so all ranks fail fast and alike.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/socket.h"

namespace aiacc::net {

namespace detail {
class RendezvousState;
}

class RendezvousServer {
 public:
  // Binds tcp://`host`:`port` (port 0: the OS chooses; see port()) and starts serving. Throws
  // CommError if the address cannot be bound (e.g. the port is taken).
  RendezvousServer(std::shared_ptr<Context> context, const std::string& host, int port);
  // Stops serving and joins the thread (within ~50 ms). Clients still waiting then time out,
  // so keep the server alive until the job's last barrier has been passed by every rank.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // "tcp://host:port" as bound, for RendezvousClient.
  const std::string& endpoint() const { return endpoint_; }
  // Rethrows an error that stopped the background thread, if any. Thread-safe.
  void check() const;
  // After a rank's abort (RendezvousClient::abort): blocks until every rank that was waiting at
  // the store then has been answered with it (RendezvousState::abort_delivered), or `deadline`;
  // true if all were. For the rank that serves the store and failed: its store must outlive
  // the news. Thread-safe.
  bool wait_abort_delivered(Deadline deadline) const;
  // The first rank's abort ("rendezvous: rank R failed: ..."), or "" without one: the job's
  // first failure, for a launcher whose ranks all fail once it is known. Thread-safe.
  std::string abort_message() const;
  // The same abort as its rank (-1: none) and that rank's own message. Thread-safe.
  struct Abort {
    int rank = -1;
    std::string reason;
  };
  Abort first_abort() const;

 private:
  void serve();

  Socket socket_;  // used only by the background thread once it runs
  std::string endpoint_;
  int port_ = 0;
  std::unique_ptr<detail::RendezvousState> state_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> abort_delivered_{false};  // state_->abort_delivered(), for other threads
  mutable std::mutex abort_mutex_;
  std::string abort_message_;  // state_->abort_message(), under abort_mutex_
  Abort first_abort_;          // the same abort, under abort_mutex_
  std::exception_ptr error_;  // written by the thread before failed_ is set
  std::thread thread_;
};

}  // namespace aiacc::net
