// RendezvousClient: how a rank (rank 0 included) reaches the rendezvous store on rank 0:
// register its addresses, wait for everyone's, share small values and meet at barriers.
// Blocking calls poll the server (1 ms, doubling up to 50 ms) until their condition holds or
// their deadline passes; a timeout names what is still missing (ranks, key, barrier).
// Not thread-safe: one client per thread (they are cheap: one DEALER socket).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/net/address_table.h"
#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/socket.h"

namespace aiacc::net {

// Another rank's failure, reported to the store (RendezvousClient::abort) and heard by this
// rank's request: the failure is that rank's, not this one's. (A configuration error's abort is
// heard as a ConfigError instead.)
class PeerFailedError : public CommError {
 public:
  using CommError::CommError;
};

// What a host name (or dotted IPv4 address) resolves to: the first IPv4 address, which is the
// one a ZeroMQ connection to it reaches (IPv4 only, as the job's sockets are), or the
// resolver's error when it does not resolve now.
struct Ipv4Resolution {
  std::string address;  // dotted, e.g. "127.0.1.1"; empty when the name does not resolve
  std::string error;    // gai_strerror's text when it does not
};
Ipv4Resolution resolve_ipv4(const std::string& host);
// Whether a dotted IPv4 address is in 127.0.0.0/8.
bool is_loopback_ipv4(const std::string& address);

class RendezvousClient {
 public:
  // `server`: "host:port" (e.g. MASTER_ADDR:MASTER_PORT) or "tcp://host:port". Connecting is
  // asynchronous: the server may start later; requests wait for it until their deadline.
  RendezvousClient(std::shared_ptr<Context> context, std::string server);

  // Registers this process as `rank` of `world_size` with the addresses it listens on.
  // Blocks until the server acknowledges. Throws CommError if the job is broken (this or
  // another rank duplicated a rank, disagreed on the world size or was out of range: the
  // message names the ranks), TimeoutError if the server does not answer by `deadline`.
  void register_rank(int rank, int world_size, const std::vector<std::string>& addresses,
                     Deadline deadline);

  // Blocks until every rank has registered; returns their addresses indexed by rank.
  // TimeoutError at `deadline` lists the ranks that never arrived. Requires register_rank.
  AddressTable wait_all(Deadline deadline);

  // Stores `value` under `key` (overwriting). Blocks until the server has it.
  void set(std::string_view key, std::span<const std::byte> value, Deadline deadline);
  void set_string(std::string_view key, std::string_view value, Deadline deadline);
  // Blocks until `key` is set (by any rank), then returns its value. TimeoutError names it.
  std::vector<std::byte> get(std::string_view key, Deadline deadline);
  std::string get_string(std::string_view key, Deadline deadline);
  // One look: the value of `key`, or nullopt when it is not set yet (no waiting for it).
  std::optional<std::string> lookup_string(std::string_view key, Deadline deadline);

  // Blocks until every rank has called barrier(`name`). A name is used once per job (use
  // "step-12/..." style names). TimeoutError lists the ranks missing. Requires register_rank.
  void barrier(std::string_view name, Deadline deadline);
  // The same meeting, for finding out who is there: waits until ranks 0..participants-1
  // (default: every rank) have arrived at `name` or `deadline` has passed, and returns those
  // still missing then (empty: all met). Throws only when the server does not answer
  // (TimeoutError) or the job is broken or aborted (CommError, ConfigError).
  std::vector<int> meet(std::string_view name, Deadline deadline, int participants = -1);

  // Tells the store that this rank failed (`message`: its error): every later request of any
  // rank throws "rendezvous: rank R failed: message", so ranks waiting at the store stop at
  // once instead of at their deadlines: a ConfigError where `config_error`, else a
  // PeerFailedError.
  // The first abort wins. Requires register_rank.
  void abort(std::string_view message, bool config_error, Deadline deadline);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  // Sends one request (op and fields, without the sequence) and returns the reply's fields
  // after a kOk/kNotYet status; kNotYet sets `not_yet`. Throws on kError and at `deadline`.
  std::string request(std::span<const std::byte> body, Deadline deadline, std::string_view what,
                      bool* not_yet = nullptr);
  void require_registered(std::string_view what) const;

  Socket socket_;
  std::string server_;
  std::uint64_t sequence_ = 0;
  int rank_ = -1;
  int world_size_ = -1;
};

}  // namespace aiacc::net
