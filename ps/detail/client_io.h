// Internal to ps/: the PsClient's I/O thread and the state its tickets share with callers.
// The thread owns one DEALER socket per shard; callers hand it fully built requests through a
// queue (woken by an eventfd that zmq_poll watches next to the sockets). Replies are matched by
// (shard, seq); a pull's rows are scattered from ZeroMQ's buffer into the caller's.
#pragma once

#include <condition_variable>
#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/net/connection_events.h"
#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/message.h"
#include "core/net/socket.h"
#include "core/net/wake_signal.h"
#include "ps/protocol.h"
#include "ps/ps_options.h"

namespace aiacc::ps::detail {

// Shared by the caller (wait) and the I/O thread (replies). Fields other than the
// synchronised ones are set before the ticket is submitted and read-only afterwards, except
// `replies` (written by the I/O thread, read after done).
struct TicketState {
  std::mutex mutex;
  std::condition_variable cv;
  int remaining = 0;  // requests not yet answered or failed
  bool done = false;
  std::exception_ptr error;
  std::string what;  // "pull of table 'x' (step 3, 1000 ids)"

  // Pulls: the j-th row of a request's reply goes to dest + request.positions[j] * dim (the
  // positions live in `positions`, per shard). With duplicate ids, dest is unique_rows and on
  // completion out[p] = unique_rows[inverse[p]].
  float* dest = nullptr;
  std::size_t dim = 0;
  std::vector<std::vector<std::int64_t>> positions;
  float* out = nullptr;
  std::vector<float> unique_rows;
  std::vector<std::int64_t> inverse;

  // Control requests: each shard's reply frames after the header.
  std::vector<std::vector<net::Message>> replies;

  // Memory this ticket's replies are written into, handed over by a caller that went away
  // before it completed (PsClient::release_after); released when the ticket completes.
  std::vector<std::shared_ptr<void>> keep_alive;

  // One request finished (error null on success); the last one completes the ticket.
  void finish_one(std::exception_ptr request_error);
};

// A request ready to send: the header and the payload frames, with their owners kept alive
// (for zero-copy sends and retries).
struct OutRequest {
  std::shared_ptr<TicketState> ticket;
  int shard = 0;
  RequestHeader header;
  std::vector<std::span<const std::byte>> frames;
  std::vector<std::shared_ptr<const void>> owners;  // owners[i] owns frames[i] (or null: copy)
  std::span<const std::int64_t> positions;          // pulls: into ticket->positions[shard]
  bool send_twice = false;                          // tests: duplicate delivery
};

class ClientIo {
 public:
  ClientIo(const ClientOptions& options, std::shared_ptr<net::Context> context);
  // Stops the thread; requests in flight fail with CommError "client closed".
  ~ClientIo();
  ClientIo(const ClientIo&) = delete;
  ClientIo& operator=(const ClientIo&) = delete;

  // Next sequence number of a request to `shard` (1, 2, ...). Thread-safe.
  std::uint64_t next_seq(int shard);
  // Queues the requests for sending (the tickets' `remaining` must already count them).
  // Thread-safe. Throws CommError when the I/O thread has stopped.
  void submit(std::vector<OutRequest> requests);
  const std::string& endpoint(int shard) const { return endpoints_[static_cast<std::size_t>(shard)]; }
  // The shards are about to exit (the job is done): a lost connection is expected, not warned
  // about. Thread-safe.
  void expect_shard_exits() { shard_exits_expected_ = true; }

 private:
  struct InFlight {
    OutRequest request;
    net::Clock::time_point sent;
    net::Clock::time_point deadline;
    int attempts = 0;
  };
  void run();
  void send(const OutRequest& request);
  void on_reply(int shard, std::vector<net::Message>& parts);
  void check_timers();
  void fail_all(const std::string& why);
  std::string describe(int shard, const OutRequest& r) const;

  ClientOptions options_;
  std::vector<std::string> endpoints_;
  // Connection events of each shard's socket (disconnected, handshake done or refused).
  // Declared before sockets_, so the sockets (whose close stops their monitors) go first.
  std::vector<net::Socket> monitors_;
  std::vector<net::Socket> sockets_;  // used by the I/O thread only
  struct Link {
    std::optional<net::Clock::time_point> down_since;  // connection lost, not yet back
    std::string why;                                    // what the last failure was
    net::ConnectionEvents events;
    std::uint64_t incarnation = 0;  // the shard process's, from its first reply (0: none yet)
    std::string broken;             // why no reply can be trusted any more (a restarted shard,
                                    // an unreadable reply): every request to it fails so
  };
  std::vector<Link> links_;  // I/O thread only
  std::atomic<bool> shard_exits_expected_{false};
  void read_monitor(int shard);
  // The error for shard k when it is broken (restarted, unreadable replies), or its connection
  // has been down longer than the grace, else "".
  std::string gone_reason(int shard, net::Clock::time_point now) const;
  net::WakeSignal wake_;              // submit() and the destructor -> I/O thread
  std::mutex queue_mutex_;
  std::vector<OutRequest> queue_;
  bool stopping_ = false;             // under queue_mutex_
  std::vector<std::uint64_t> seq_;    // under queue_mutex_
  std::vector<std::map<std::uint64_t, InFlight>> in_flight_;  // I/O thread only, per shard
  std::thread thread_;
};

}  // namespace aiacc::ps::detail
