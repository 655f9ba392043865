// PsClient: a worker's connection to every parameter-server shard (shared/DESIGN.md §3, §5).
//
// pull(table, ids) and push(table, ids, grads) de-duplicate the ids locally (a push sums the
// gradient rows of repeated ids) unless the caller says they are unique, split them by shard (ps/sharding.h), send one batched request
// per shard to all shards at once, and return a Ticket; wait(ticket) blocks until every shard
// has answered. Requests and replies are ZeroMQ multipart messages (ps/protocol.h); bulk
// frames of at least zero_copy_min_bytes are handed to ZeroMQ without a copy, and pulled rows
// are scattered straight from ZeroMQ's receive buffer into the caller's.
//
// One background I/O thread owns the sockets (one DEALER per shard): it sends queued requests,
// receives replies, resends a request not answered within retry_interval_s (same worker,
// session, step, seq: the shard applies a push once) and fails it with TimeoutError after
// timeout_s. Errors reach the caller at wait(), naming the shard, its endpoint, the op, the
// table and the step.
//
// Thread-safety: every method may be called from any thread; tickets may be waited on from
// any thread (each ticket once or more). Lifetimes: pull() writes into `rows` until wait()
// returns for its ticket, so `rows` must outlive that wait; `ids` and `grads` are copied
// before pull()/push() return. Destroying the client fails the tickets still in flight.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/net/context.h"
#include "core/tensor.h"
#include "ps/protocol.h"
#include "ps/ps_options.h"
#include "ps/server_table.h"

namespace aiacc::ps {

// What a caller knows of a request's ids. `unique`: no id repeats (EmbeddingStore's callers
// de-duplicate, as the models' embedding layers do), so the client skips its own
// de-duplication: a 100k-id request's hash table does not fit in the caches, and building it
// was 15% of a worker's time in `aiacc-bench ps`. Should an id repeat anyway, a pull fetches
// its row twice (the rows are still right) and a push sends both gradient rows, which an
// async or bounded table's shard applies one after the other instead of summed (a sync table
// sums them; admission counts each).
enum class RequestIds { may_repeat, unique };

namespace detail {
struct TicketState;
struct OutRequest;
class ClientIo;
}  // namespace detail

// A handle on an asynchronous request to one or more shards. Copyable (copies share state).
class Ticket {
 public:
  Ticket() = default;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class PsClient;
  explicit Ticket(std::shared_ptr<detail::TicketState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::TicketState> state_;
};

class PsClient {
 public:
  // Connects (asynchronously: shards may start later) to options.endpoints. Throws ConfigError
  // for no endpoints or a bad option. `context`: shared, or null for a private one.
  explicit PsClient(ClientOptions options, std::shared_ptr<net::Context> context = nullptr);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  int num_shards() const { return static_cast<int>(options_.endpoints.size()); }
  int worker() const { return options_.worker; }
  const ClientOptions& options() const { return options_; }

  // Registers `config` on every shard (blocking). Registering the same table again (from this
  // or another worker) is fine; a different config under the same name is a ConfigError from
  // the shard (rethrown as CommError naming it).
  void create_table(const TableConfig& config);
  const TableConfig& table(const std::string& name) const;

  // Fetches rows [ids.size(), dim] of `table` into `rows` (duplicates allowed: with
  // RequestIds::may_repeat each unique id is fetched once). `step`: the number of steps this worker has completed (bounded
  // staleness holds the pull while step - slowest worker's steps > s). Empty ids: a ticket
  // that is already done (bounded tables still check in with every shard). `read_only`: the
  // shards create no rows and count nothing (admission, eviction, steps): an evaluation's reads.
  Ticket pull(const std::string& table, std::span<const std::int64_t> ids, float* rows,
              std::uint64_t step, RequestIds kind = RequestIds::may_repeat, bool read_only = false);
  // Sends gradient rows grads [ids.size(), dim] of `table` at learning rate `lr` for `step`
  // (RequestIds::may_repeat: repeated ids are summed first). The ticket completes when every shard has applied it (sync:
  // when every worker's push of that step has been applied).
  Ticket push(const std::string& table, std::span<const std::int64_t> ids, const float* grads,
              double lr, std::uint64_t step, RequestIds kind = RequestIds::may_repeat);

  // Blocks until the ticket's requests are answered; rethrows the first error (CommError,
  // TimeoutError naming the shard). Waiting on an invalid ticket is a no-op.
  void wait(const Ticket& ticket);
  bool ready(const Ticket& ticket) const;
  // For a caller that goes away without waiting: keeps `owner` (the memory the ticket's pull
  // writes its rows into) alive until the ticket completes, answered or failed, then releases
  // it. Its outcome is not reported. An invalid or completed ticket releases `owner` at once.
  void release_after(const Ticket& ticket, std::shared_ptr<void> owner);

  // Per-shard statistics of every table (blocking).
  std::vector<std::vector<TableStats>> stats();
  // Each shard writes <directory>/ps-shard-<k>-of-<n>.safetensors atomically (blocking);
  // returns the paths. The directory must exist where the shards run.
  std::vector<std::string> save_checkpoint(const std::string& directory);
  // Each shard restores its file from <directory> (blocking).
  void load_checkpoint(const std::string& directory);
  // Every row of `table` from all shards, as LocalEmbeddingStore::save_rows names and sorts
  // them; and its inverse (rows are routed to their shards; each shard's rows are replaced).
  std::vector<std::pair<std::string, Tensor>> dump_rows(const std::string& table);
  void load_rows(const std::string& table, const std::vector<std::pair<std::string, Tensor>>& rows);
  // Asks every shard process to exit (blocking until each acknowledged).
  void shutdown_servers();
  // This client's job is done and a worker will shut the shards down: their connections
  // closing is expected from now on (logged at debug, not warned about).
  void expect_shard_exits();

 private:
  const TableConfig& table_config(const std::string& name) const;
  // Rows per request chunk for rows of `dim` floats (ClientOptions::chunk_bytes).
  std::size_t chunk_rows(std::size_t dim) const;
  detail::OutRequest make_request(const std::shared_ptr<detail::TicketState>& ticket, int shard,
                                  Op op, const std::string& table, std::uint64_t step,
                                  std::size_t count, std::size_t dim);
  // Hands `requests` (all of ticket `t`) to the I/O thread; an empty set completes `t` at once.
  Ticket submit(std::shared_ptr<detail::TicketState> t, std::vector<detail::OutRequest> requests);
  // Sends `op` with one optional payload frame to every shard; returns the finished ticket.
  std::shared_ptr<detail::TicketState> broadcast(Op op, std::uint64_t table,
                                                 const std::string& payload_text,
                                                 const std::vector<std::string>& per_shard_text);

  ClientOptions options_;
  std::uint64_t session_;
  mutable std::mutex tables_mutex_;
  std::map<std::string, TableConfig> tables_;
  std::unique_ptr<detail::ClientIo> io_;
};

}  // namespace aiacc::ps
