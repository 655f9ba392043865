// Options of the parameter-server module: one struct per role (table, server, client), each a
// config section (visit pattern, core/config/schema.h) so the trainer can read them from YAML
// (`ps:`) and print the resolved values. Defaults are for a job on loopback or a LAN; the
// `*_for_testing` knobs let tests reach the retry and deduplication paths cheaply.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/schema.h"

namespace aiacc::ps {

// How a table's pushes from several workers are combined (shared/DESIGN.md §5).
//   async    every push is applied when it arrives; pulls are served at once.
//   sync     a step's pushes from all num_workers workers are aggregated (summed in worker
//            order, then divided by num_workers when sync_average) and applied as one update;
//            each push's reply waits for that update, so the push is a per-step barrier.
//   bounded  pushes are applied when they arrive; a pull for step t from any worker is held
//            until t - (steps completed by the slowest worker) <= staleness.
struct TableOptions {
  std::string consistency = "async";
  // s for bounded: how many steps a worker may run ahead of the slowest. 0 is BSP-like.
  int staleness = 0;
  // Workers that push to this table (ids 0 .. num_workers-1); sync and bounded wait for all.
  int num_workers = 1;
  // sync: divide the summed gradient by num_workers, matching dense all-reduce averaging, so
  // W workers with batch B/W each train like one worker with batch B.
  bool sync_average = true;
  // Admission: a row is created only once its id has been requested this many times (pull or
  // push); until then a pull returns its deterministic initial value and a push is dropped.
  // 1 (default): every id is admitted on first touch.
  std::int64_t min_count = 1;
  // Eviction: when a shard holds more rows than this, the least recently touched rows are
  // dropped down to evict_to_fraction of it (a dropped row comes back with its initial value).
  // 0 (default): unbounded.
  std::int64_t capacity_rows = 0;
  double evict_to_fraction = 0.9;
  // Worker side: each worker keeps up to cache_rows of the table's rows it pulled
  // (core/embedding/hot_row_cache.h, least recently used out) and serves a kept row without
  // asking the shards for cache_staleness steps after fetching it. Hot ids (the few values of a
  // CTR feature most batches hold) then cross the network once per cache_staleness + 1 steps.
  // Their copy misses the updates made since it was fetched, so: async tables take any bound;
  // bounded ones see rows up to staleness + cache_staleness steps behind the slowest worker;
  // sync ones only 0 (the cache then saves nothing across steps). 0 rows (default): off.
  std::int64_t cache_rows = 0;
  int cache_staleness = 0;

  template <class V>
  void visit(V& v) {
    v.field("consistency", consistency, "async | sync | bounded",
            config::one_of({"async", "sync", "bounded"}));
    v.field("staleness", staleness, "bounded: steps a worker may run ahead of the slowest",
            config::at_least(0));
    v.field("num_workers", num_workers, "workers pushing to this table", config::at_least(1));
    v.field("sync_average", sync_average, "sync: average (true) or sum the workers' gradients");
    v.field("min_count", min_count, "requests of an id before its row is created (1: always)",
            config::at_least<std::int64_t>(1));
    v.field("capacity_rows", capacity_rows, "rows per shard before eviction (0: unbounded)",
            config::at_least<std::int64_t>(0));
    v.field("evict_to_fraction", evict_to_fraction, "eviction keeps this fraction of capacity (at most 99%)",
            config::in_range(0.1, 1.0));
    v.field("cache_rows", cache_rows, "rows each worker keeps from its pulls (0: no cache)",
            config::in_range<std::int64_t>(0, (std::int64_t{1} << 31) - 1));
    v.field("cache_staleness", cache_staleness,
            "steps a kept row serves after its fetch (sync tables: 0)", config::at_least(0));
  }
};

struct ServerOptions {
  // Where the shard listens (ZeroMQ endpoint; port 0 or * lets the OS choose, see
  // PsServer::endpoint()). Loopback by default: listen only on the configured interface.
  std::string bind = "tcp://127.0.0.1:0";
  int shard = 0;
  int num_shards = 1;
  // LocalEmbeddingStore partitions per table: rows are spread over them by hash and a large
  // request processes them in parallel (OpenMP, more than one thread), each under its own lock.
  int num_partitions = 16;
  // OpenMP threads a large request's partitions run on (0: OpenMP's default, one per core).
  // Colocated or co-hosted shards should share the cores, e.g. cores / processes: OpenMP
  // threads spin while they wait, so oversubscribed cores slow every process down.
  int num_threads = 0;
  // A pull held for bounded staleness is answered with an error after this long (the worker
  // that never catches up is named in the message), and so are the pushes of a synchronous
  // step some worker has not pushed after 0.8 of it (before the pushing workers' own deadline
  // of about this long, so that they hear which worker is missing). 300 s: the clients' default
  // (ClientOptions::timeout_s, and aiacc-train's cluster.ps.timeout_s, which a job's shards take).
  double wait_timeout_s = 300.0;
  // Row counts and memory per table are logged at this interval (0: never).
  double log_interval_s = 30.0;
  // Clients (worker processes) that connect to this shard, when known (0: unknown): lets
  // PsServer::connections() tell when one of them is gone.
  int expected_clients = 0;
  // Tests: drop the replies to the first N pushes (they are applied), so clients retry.
  int drop_push_replies_for_testing = 0;
  // Tests: on the first push of a step beyond this one, send this signal to the shard's own
  // process, once (SIGKILL: a crash; SIGSTOP: a hung host; SIGTERM: a stop request). -1: never.
  std::int64_t fault_after_step_for_testing = -1;
  int fault_signal_for_testing = 0;
  // Tests: applying this step of a sync table fails (as running out of memory would). -1: never.
  std::int64_t fail_sync_step_for_testing = -1;

  template <class V>
  void visit(V& v) {
    v.field("bind", bind, "ZeroMQ endpoint this shard listens on", config::non_empty());
    v.field("shard", shard, "index of this shard", config::at_least(0));
    v.field("num_shards", num_shards, "number of shards", config::at_least(1));
    v.field("num_partitions", num_partitions, "store partitions per table (parallelism)",
            config::in_range(1, 4096));
    v.field("num_threads", num_threads, "OpenMP threads per request (0: OMP_NUM_THREADS, else one per "
            "CPU this process can keep busy: its affinity, cut to its container's CPU limit)",
            config::at_least(0));
    v.field("wait_timeout_s", wait_timeout_s, "seconds a staleness-held pull may wait",
            config::greater_than(0.0));
    v.field("log_interval_s", log_interval_s, "seconds between row/memory log lines (0: off)",
            config::at_least(0.0));
    v.field("drop_push_replies_for_testing", drop_push_replies_for_testing,
            "tests only: drop the first N push replies", config::at_least(0));
  }
};

struct ClientOptions {
  // One endpoint per shard, in shard order (shard k serves the ids with shard_of(id) == k).
  std::vector<std::string> endpoints;
  // This worker's id in [0, num_workers) of every table it uses.
  int worker = 0;
  // Every request fails with TimeoutError (naming the shard, table, op, step) after this long,
  // including time a sync push or a bounded pull waits for the slowest worker: keep it above
  // the longest expected skew between workers (evaluation pauses, checkpoints). The shards'
  // ServerOptions::wait_timeout_s should be the same (a job's are): a sync step's shard gives up
  // at 0.8 of it, so the longest skew a sync table takes is 0.8 x that. 300 s, as aiacc-train's
  // cluster.ps.timeout_s and ServerOptions::wait_timeout_s (aiacc-ps-server --wait-timeout-s).
  double timeout_s = 300.0;
  // A request not answered after this long is sent again with the same (worker, step, seq);
  // the server applies a push once however often it arrives.
  double retry_interval_s = 10.0;
  // Frames of at least this many bytes are handed to ZeroMQ without a copy (-1: always copy).
  std::int64_t zero_copy_min_bytes = 64 * 1024;
  // A shard's part of a pull (and of an async push) is sent as requests of at most this many
  // row bytes, pipelined. Chunks keep every copy on the way (rows into the reply, the kernel's,
  // the scatter into the caller's buffer) in cache; one 25 MB frame streams each copy through
  // memory instead. aiacc-bench ps (2 shards, 2 workers, 2 cores; dim 128, 100k ids): pull
  // 1.26-1.30 vs 0.99-1.23 GB/s unchunked, pull+push step 0.88-0.99 vs 0.42-0.53 GB/s.
  // 0: never split.
  std::int64_t chunk_bytes = 256 * 1024;
  // A shard whose connection dropped (its process died, or closed it) and has not come back
  // within this many seconds fails its requests with a CommError saying so, instead of leaving
  // them to timeout_s (kept long for slow sync steps). ZeroMQ reconnects by itself; a shard
  // that comes back in time loses nothing (requests are retried).
  double reconnect_grace_s = 10.0;
  // Tests: send every push, or every pull, twice (same sequence number).
  bool duplicate_pushes_for_testing = false;
  bool duplicate_pulls_for_testing = false;

  template <class V>
  void visit(V& v) {
    v.field("endpoints", endpoints, "ZeroMQ endpoint of each shard, in shard order");
    v.field("worker", worker, "this worker's id", config::at_least(0));
    v.field("timeout_s", timeout_s, "seconds before a request fails", config::greater_than(0.0));
    v.field("retry_interval_s", retry_interval_s, "seconds before an unanswered request is resent",
            config::greater_than(0.0));
    v.field("zero_copy_min_bytes", zero_copy_min_bytes,
            "send frames this large without copying (-1: always copy)",
            config::at_least<std::int64_t>(-1));
    v.field("chunk_bytes", chunk_bytes, "row bytes per request chunk (0: no chunks)",
            config::at_least<std::int64_t>(0));
    v.field("reconnect_grace_s", reconnect_grace_s,
            "seconds a shard whose connection dropped may take to come back before its requests fail",
            config::greater_than(0.0));
    v.field("duplicate_pushes_for_testing", duplicate_pushes_for_testing,
            "tests only: send every push twice");
    v.field("duplicate_pulls_for_testing", duplicate_pulls_for_testing,
            "tests only: send every pull twice");
  }
};

}  // namespace aiacc::ps
