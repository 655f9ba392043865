// PsServer: one parameter-server shard (shared/DESIGN.md §5).
//
// What it does. Binds a ZeroMQ ROUTER socket and serves the ps/protocol.h requests of any
// number of workers from one request thread: create_table, batched pull and push of embedding
// rows, stats, checkpoints. Each table is a ServerTable (a LocalEmbeddingStore: hash
// partitions, each an open-addressing table over an arena of [value | optimiser state] rows
// with its own lock, processed by OpenMP threads; rows created on first touch from (id, seed))
// plus its consistency state: async (apply on arrival), sync (SyncAggregator: a step's pushes
// from all workers are merged, then applied) or bounded staleness (StalenessClock: pulls wait
// until the puller is at most s steps ahead of the slowest worker). Every request carries
// (worker, session, step, seq); a repeated push is acknowledged but applied once (RequestLog).
//
// Where it runs. Inside a worker process (colocated: construct it, it serves from its own
// thread) or as its own process (ps/server_process.h: the aiacc-ps-server program, or the
// benchmark's server processes). Which ids it owns is the client's business (ps/sharding.h):
// the server serves whatever ids it is sent.
//
// Checkpoints. save_checkpoint() writes every table of the shard to one safetensors file,
// atomically: tensors "<table>.ids" (i64 [R], sorted), "<table>.values" (f32 [R, D]),
// "<table>.state" (f32 [R, S]); metadata "aiacc.ps.shard", "aiacc.ps.num_shards" and
// "aiacc.ps.table.<name>" (the table's config as YAML). load_checkpoint() restores them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/net/context.h"
#include "core/net/deadline.h"
#include "ps/ps_options.h"
#include "ps/server_table.h"
#include "ps/shard_checkpoint.h"

namespace aiacc::ps {

class PsServer {
 public:
  // Binds options.bind, restores `initial` when given (as load_checkpoint does: DataError when
  // it belongs to another shard), then logs "serving" and starts serving: no request is served
  // before the restore. Throws CommError when the endpoint cannot be bound, ConfigError for bad
  // options. `context`: share one with the rest of the process, or null for a private one.
  explicit PsServer(const ServerOptions& options, std::shared_ptr<net::Context> context = nullptr,
                    const ShardCheckpoint* initial = nullptr);
  // Stops serving and joins the request thread (within ~50 ms). Requests in flight are dropped
  // (their clients time out or retry against a restarted shard).
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // The endpoint actually bound, e.g. "tcp://127.0.0.1:41234": what clients connect to.
  const std::string& endpoint() const;
  int shard() const;
  int num_shards() const;

  // Stops serving (idempotent, returns at once; the destructor joins).
  void stop();
  // Gives up: answers every push waiting for its step (sync) and every held pull (bounded)
  // with an error carrying `reason` and what each was waiting for, then stops. For a shard
  // whose job is broken (a worker gone), so the others hear why. Thread-safe; returns at once.
  void abort(const std::string& reason);
  // Blocks until a client's shutdown request or stop(), or `deadline`; true when stopped.
  bool wait_stopped(net::Deadline deadline) const;
  // Rethrows the error that ended the request thread, if any. Request errors do not end it:
  // they are answered to the client that caused them.
  void check() const;

  // Client connections (handshake completed): open now, the most ever open at once, and, once
  // options.expected_clients had all connected, for how long fewer have been open (0 while
  // none is missing). A worker whose process died shows here; the caller decides how long to
  // wait for it. A reconnect whose new connection arrives before the old one's close, or an
  // extra client, never counts as missing. Thread-safe.
  struct Connections {
    int open = 0;
    int peak = 0;
    double missing_s = 0.0;
  };
  Connections connections() const;

  // Thread-safe (serialised with request handling):
  std::vector<TableStats> stats() const;
  // Request seqs the retry log holds above its floors (RequestLog::tracked(); for tests: it
  // stays near the requests in flight however long the job runs).
  std::size_t tracked_requests() const;
  // Writes the shard's checkpoint to `path` atomically (IoError on failure).
  void save_checkpoint(const std::string& path) const;
  // Replaces the rows of every table in the file (creating tables it does not have yet, with
  // the file's settings; a table registered here keeps its own). Throws DataError naming the
  // file when it belongs to another shard (index or count), or a table's rows do not fit the
  // one registered here (another dim, optimiser, or optimiser state layout; checked for every
  // table before any is loaded).
  void load_checkpoint(const std::string& path);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiacc::ps
