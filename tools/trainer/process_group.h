// ProcessGroup: one process's membership in a distributed job (shared/DESIGN.md §6). Ranks
// 0 .. workers-1 train; ranks workers .. workers+servers-1 each serve one parameter-server
// shard. All meet at the rendezvous store; workers build two communicators over the ring
// module: `dense` for gradient buckets (driven by the GradientFuser's thread during backward)
// and `control` for everything the training thread exchanges itself (start-up broadcasts,
// replicated sparse tables, metrics), so the two never interleave messages on one channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/net/context.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/tensor.h"
#include "ps/client.h"
#include "ring/allreduce.h"
#include "ring/communicator.h"
#include "ring/host_allgather.h"
#include "tools/trainer/cluster_options.h"
#include "tools/trainer/launch.h"

namespace aiacc::trainer {

class ProcessGroup {
 public:
  // Joins the job: serves the rendezvous store when the role says so, registers, and (workers)
  // connects both communicators and the parameter-server client. Blocks until every rank has
  // joined or cluster.start_timeout_s (TimeoutError naming the missing ranks).
  ProcessGroup(const ClusterOptions& cluster, const ProcessRole& role);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  const ProcessRole& role() const { return role_; }
  const ClusterOptions& cluster() const { return cluster_; }
  int rank() const { return role_.rank; }
  bool is_worker() const { return role_.rank < cluster_.workers; }
  int worker() const { return role_.rank; }
  int workers() const { return cluster_.workers; }
  std::string name() const { return role_.name(cluster_); }
  // The ranks of this job that share this process's cores, itself included: those on the same
  // kernel, as each registered at the store (for the compute threads, where no launcher
  // variable says how many processes share the machine).
  int ranks_on_host() const { return ranks_on_host_; }

  // Start-up check, collective over every rank (servers too): each publishes `text` under
  // `what`; a rank whose text differs from rank 0's stops the job with ConfigError naming the
  // ranks and the first differing lines (for YAML: the keys).
  void check_agreement(const std::string& what, const std::string& text);
  // The same among workers only (parameter lists, plans).
  void check_worker_agreement(const std::string& what, const std::string& text);

  // Server ranks: serves this rank's shard until a worker shuts the servers down.
  // `stop_signal` (when given) says which stop signal the shard got (0: none): the first is
  // published at the store as kShardStopKey, for worker 0's next stop check, since only the
  // workers can stop the job at a step with its checkpoint.
  void serve_shard(const std::function<int()>& stop_signal = {});
  // The store key where a shard publishes a stop signal it got (its number, as text).
  static constexpr const char* kShardStopKey = "stop/shard-signal";
  // Worker 0, at a stop check: the signal a shard published (0: none). The store may have gone
  // with the process that held it (a killed launcher, whose signal is why the job stops): then
  // it answers 0 after kStopStoreTimeoutS, logs that once and asks no more.
  int shard_stop_signal();
  // Seconds a stop signal's exchange through the store may take, far below start_timeout_s: a
  // stopping job has its checkpoint to write before the signal's sender gives up on it.
  static constexpr double kStopStoreTimeoutS = 3.0;

  // Workers only.
  std::shared_ptr<ring::Communicator> dense() const { return dense_; }
  std::shared_ptr<ring::Communicator> control() const { return control_; }
  // The job's rendezvous store, for joining further collectives (NCCL's ids). Training thread.
  net::RendezvousClient& rendezvous() { return *rendezvous_; }
  // The client of every shard (connected on first use); null when the job has no servers.
  std::shared_ptr<ps::PsClient> ps_client();

  // Collectives on the control communicator (workers only, same order on every worker):
  // element-wise sum of `values` over workers (f64, exact enough for counters and metrics).
  void sum(std::span<double> values);
  // Every worker's bytes, in worker order (sizes may differ). The views stay valid until the
  // next allgather() (with one worker, the view is `mine` itself).
  std::vector<std::span<const std::byte>> allgather(std::span<const std::byte> mine);
  // Copies worker `root`'s `tensor` to every worker.
  void broadcast(Tensor& tensor, int root);
  // Returns once every worker has called it.
  void barrier();
  // broadcast() and barrier() explain their own timeouts, as they also run at start and at the
  // end of the job where no caller does: a TimeoutError of theirs names the operation and ends
  // with what explain_timeout found.

  // End of the job: worker 0 waits for every worker, then shuts the servers down.
  void finish();

  // This rank is failing with `message`: tells the rendezvous store, so the ranks waiting there
  // (start-up checks, a slow rank's data check) fail at once naming this rank, with an error of
  // the same kind (ConfigError where `config_error`), instead of at their start timeout. Rank 0,
  // whose store goes with it, keeps it up until every rank has been told or a few seconds have
  // passed. Best effort: never throws.
  void report_failure(const std::string& message, bool config_error) noexcept;

  // A collective of this worker timed out (`e`, during `operation`): tells the other workers at
  // the store whom it waited for and follows their reports to the rank that holds them all up
  // (ring/wait_chain.h), so an error that names a healthy neighbour also names the silent rank.
  // Returns "; wait chain: ..." to append to the error, or "" (one worker, or nothing found).
  // Takes up to kWaitChainWindowS (the others' timeouts fall due about when this one did), less
  // when the chain closes sooner; never throws. Training thread (it uses rendezvous()).
  // Once per job (the store keeps one report per rank): "" after the first call, e.g. for a
  // timeout of broadcast() or barrier() that already carries its finding.
  std::string explain_timeout(const TimeoutError& e, std::string_view operation) noexcept;
  static constexpr double kWaitChainWindowS = 3.0;

 private:
  void check(const std::string& what, const std::string& text, int ranks);
  // Runs `collective`; its TimeoutError comes back naming `operation`, with explain_timeout's
  // finding appended (a PeerTimeoutError keeps its peer).
  void explaining_timeouts(std::string_view operation, const std::function<void()>& collective);
  // An in-place sum over `words` 8-byte elements of `dtype` (f64 or i64) on the control
  // communicator, built on first use and kept: within a host it runs through shared memory,
  // whose set-up (segments) is too slow to repeat every step. Collective like every use.
  struct CachedSum {
    std::vector<std::int64_t> words;
    std::unique_ptr<ring::Allreduce> allreduce;
  };
  CachedSum& cached_sum(DType dtype, std::int64_t words);

  ClusterOptions cluster_;
  ProcessRole role_;
  std::shared_ptr<net::Context> context_;
  std::unique_ptr<net::RendezvousServer> rendezvous_server_;
  std::unique_ptr<net::RendezvousClient> rendezvous_;
  std::shared_ptr<ring::Communicator> dense_;
  std::shared_ptr<ring::Communicator> control_;
  std::shared_ptr<ps::PsClient> ps_client_;
  std::map<std::pair<int, std::int64_t>, CachedSum> sums_;  // by (dtype, words)
  std::int64_t allgather_words_ = 16;  // per-worker block capacity of allgather() across hosts, grows
  std::unique_ptr<ring::HostAllgather> host_allgather_;  // allgather() when every worker shares a host
  int checks_ = 0;
  int ranks_on_host_ = 1;
  bool stop_store_gone_ = false;  // shard_stop_signal: the store did not answer once
  bool timeout_explained_ = false;  // explain_timeout has published this rank's report
};

// Where rank 0 serves the rendezvous store, given the master address `host` (named by `source`:
// MASTER_ADDR or cluster.master_addr), what it resolves to on this host, and
// cluster.ring.interface: the loopback address it resolves to when the job is on loopback (a
// host name may resolve to 127.0.1.1, where a store on 127.0.0.1 would never answer), otherwise
// the interface, never every interface (a store reachable on interfaces the job does not use is
// attack surface for nothing). Throws ConfigError where the other ranks could not reach it.
std::string rendezvous_bind_host(const std::string& source, const std::string& host,
                                 const net::Ipv4Resolution& resolved, const std::string& interface);

}  // namespace aiacc::trainer
