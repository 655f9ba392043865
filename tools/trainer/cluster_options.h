// The job's `cluster:` section: how many workers and parameter-server shards, how processes are
// started and find each other, where each parameter is synchronised, and the ring's and the
// parameter servers' options. One YAML runs on one machine (the local launcher) or on a cluster
// (mpirun, srun, torchrun-style environments) unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/schema.h"
#include "ring/communicator.h"

namespace aiacc::trainer {

// One placement rule: parameters whose name matches the glob `match` (fnmatch: *, ?, [..]) are
// synchronised as `place` says. The first matching rule wins; unmatched parameters use auto.
struct PlacementRule {
  std::string match = "*";
  std::string place = "auto";

  template <class V>
  void visit(V& v) {
    v.field("match", match, "glob over parameter names, e.g. 'deep.*'", config::non_empty());
    v.field("place", place, "auto | ring | ps", config::one_of({"auto", "ring", "ps"}));
  }
};

// Dense collectives (ring/): the communicator plus gradient fusion.
struct RingOptions {
  ring::CommunicatorOptions comm;
  std::int64_t bucket_bytes = 4 << 20;
  std::string wire = "f32";
  bool hierarchical = true;
  bool auto_tune = false;
  // Workers on GPUs: where their dense gradients are all-reduced. "nccl": on the devices
  // (ring/device_collective.h); "host": copied to host memory for the CPU ring; "auto": nccl
  // when this build has it and every worker of a host has a GPU of its own, else host.
  std::string device_collectives = "auto";

  template <class V>
  void visit(V& v) {
    comm.visit(v);
    v.field("bucket_bytes", bucket_bytes, "gradient fusion bucket size in bytes (at least 1024)",
            config::at_least<std::int64_t>(1024));
    v.field("wire", wire, "f32 | f16 | bf16: element type on the ring's wire (f16/bf16 halve the bytes; with hierarchical, sums within a host stay f32)",
            config::one_of({"f32", "f16", "bf16"}));
    v.field("hierarchical", hierarchical,
            "reduce through shared memory within a host, ring between hosts");
    v.field("auto_tune", auto_tune,
            "try bucket sizes (1, 4, 16 MiB and bucket_bytes) and stream counts (powers of two up to streams) "
            "during the first steps and keep the fastest");
    v.field("device_collectives", device_collectives,
            "workers on GPUs: nccl (all-reduce on the devices) | host (through host memory and the CPU "
            "ring) | auto (nccl where built and each worker has its own GPU)",
            config::one_of({"auto", "nccl", "host"}));
  }
};

// Parameter servers (ps/): consistency and the shards' resources.
struct PsOptions {
  std::string consistency = "sync";
  int staleness = 0;
  std::int64_t min_count = 1;
  std::int64_t capacity_rows = 0;
  std::int64_t cache_rows = 0;
  int cache_staleness = 0;
  int partitions = 16;
  int threads = 1;
  double timeout_s = 300.0;
  double reconnect_grace_s = 10.0;

  template <class V>
  void visit(V& v) {
    v.field("consistency", consistency,
            "sync (every step's pushes averaged, like one big batch) | async | bounded",
            config::one_of({"async", "sync", "bounded"}));
    v.field("staleness", staleness, "bounded: steps a worker may run ahead of the slowest",
            config::at_least(0));
    v.field("min_count", min_count, "requests of an id before its row is created (1: always)",
            config::at_least<std::int64_t>(1));
    v.field("capacity_rows", capacity_rows, "rows per shard before eviction (0: unbounded)",
            config::at_least<std::int64_t>(0));
    v.field("cache_rows", cache_rows,
            "rows of each sharded table a worker keeps from its pulls (0: no cache)",
            config::in_range<std::int64_t>(0, (std::int64_t{1} << 31) - 1));
    v.field("cache_staleness", cache_staleness,
            "steps a kept row is served after its fetch without asking the shards (async, or "
            "bounded: adds to staleness; sync: 0)",
            config::at_least(0));
    v.field("partitions", partitions, "store partitions per table on each shard",
            config::in_range(1, 4096));
    v.field("threads", threads, "compute threads of each shard process (0: OMP_NUM_THREADS, else one per CPU "
            "it can keep busy: its affinity, cut to its container's CPU limit)", config::at_least(0));
    v.field("timeout_s", timeout_s, "seconds a pull or push may take before the job fails",
            config::greater_than(0.0));
    v.field("reconnect_grace_s", reconnect_grace_s,
            "seconds a shard whose connection dropped (process died) may take to come back before "
            "the job fails (at most timeout_s)",
            config::greater_than(0.0));
  }
  // Settings the consistency would ignore or refuse only once the job has started.
  void validate(const config::Node& node) const {
    if (consistency == "sync" && cache_staleness > 0) {
      node.child("cache_staleness").fail("a synchronous table's rows must be this step's: 0 with consistency sync "
                                         "(async or bounded take a stale cache)");
    }
    if (consistency != "bounded" && staleness > 0) {
      node.child("staleness").fail(fmt::format("applies to consistency bounded only (this job's is {})", consistency));
    }
  }
};

// Who may join the job and talk to its processes (README "Reliability and security").
struct SecurityOptions {
  bool curve = true;
  bool encrypt_ring = true;
  std::string token_file;

  template <class V>
  void visit(V& v) {
    v.field("curve", curve,
            "authenticate and encrypt every TCP connection of the job (rendezvous, parameter "
            "servers, ring) with ZeroMQ CURVE keys derived from the job token; false: plain TCP, "
            "for trusted networks only");
    v.field("encrypt_ring", encrypt_ring,
            "with curve: also encrypt the dense ring's TCP traffic between hosts; false: plain TCP "
            "at full speed, each connection's handshake still proving the job token");
    v.field("token_file", token_file,
            "file holding the job token (mode 600); AIACC_JOB_TOKEN wins; a local job without "
            "either generates one");
  }
};

struct ClusterOptions {
  int workers = 1;
  int servers = 0;
  std::string launcher = "auto";
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double start_timeout_s = 120.0;
  bool pin_cores = false;
  int max_restarts = 0;
  std::vector<PlacementRule> placement;
  int placement_probe_batches = 4;
  std::int64_t replica_max_mib = 1024;
  bool sync_batch_norm = false;
  RingOptions ring;
  PsOptions ps;
  SecurityOptions security;

  int world_size() const { return workers + servers; }
  bool distributed() const { return world_size() > 1; }

  template <class V>
  void visit(V& v) {
    v.field("workers", workers, "training processes (ranks 0 .. workers-1)", config::in_range(1, 4096));
    v.field("servers", servers,
            "parameter-server shard processes (ranks workers .. workers+servers-1); 0: sparse "
            "tables are replicated on every worker", config::in_range(0, 4096));
    v.field("launcher", launcher,
            "auto: join the job an outer launcher (mpirun, srun, torchrun-style RANK/WORLD_SIZE) "
            "started, else start workers+servers local processes | local | external",
            config::one_of({"auto", "local", "external"}));
    v.field("master_addr", master_addr,
            "where rank 0 serves the rendezvous store under an outer launcher (MASTER_ADDR wins)",
            config::non_empty());
    v.field("master_port", master_port, "its port (MASTER_PORT wins)", config::in_range(1, 65535));
    v.field("start_timeout_s", start_timeout_s, "seconds every rank may take to join the job",
            config::greater_than(0.0));
    v.field("pin_cores", pin_cores,
            "local launcher: pin process r to the r-th core this launcher may use (round robin), "
            "so a process waiting for its peers never runs on another process's core");
    v.field("max_restarts", max_restarts,
            "local launcher: times a failed job is started again from its newest checkpoint "
            "(needs train.checkpoint.resume: auto)",
            config::in_range(0, 1000));
    v.field("placement", placement,
            "rules [{match: GLOB, place: auto|ring|ps}], first match wins (a rule that places no "
            "parameter is an error); dense tensors always use the ring");
    v.field("placement_probe_batches", placement_probe_batches,
            "auto placement: batches read at start to measure the rows each table touches",
            config::in_range(1, 1000));
    v.field("replica_max_mib", replica_max_mib,
            "auto placement: a sparse table replicated on every worker (ring) may hold at most "
            "this many MiB; bigger or unbounded tables go to the parameter servers",
            config::at_least<std::int64_t>(0));
    v.field("sync_batch_norm", sync_batch_norm,
            "batch norm statistics over all workers' batches (SyncBatchNorm): W workers then "
            "train exactly like one with W times the batch; costs three small all-reduces per "
            "batch-norm layer and step");
    v.field("ring", ring, "dense collectives: streams, fusion, wire type, timeouts");
    v.field("ps", ps, "parameter servers: consistency, partitions, timeouts");
    v.field("security", security, "job token and CURVE authentication/encryption");
  }
  // What the dense ring would refuse only once its ranks connect (--dry-run says it too).
  void validate(const config::Node& node) const {
    if (workers > 1 && ring.comm.transport == "tcp" && security.curve && security.encrypt_ring) {
      node.child("ring").child("transport").fail(
          "tcp sends gradients unencrypted, but this job's connections use CURVE encryption "
          "(cluster.security.curve and encrypt_ring): use zmq or auto, or set cluster.security.encrypt_ring: false "
          "for a plain ring whose handshakes prove the job token");
    }
  }
};

}  // namespace aiacc::trainer
