// How a process finds its place in a job (rank, world size, rendezvous store) and the local
// launcher that starts a whole job on this machine.
//
// Environments understood, first match wins:
//   AIACC_RANK, AIACC_WORLD_SIZE, AIACC_RENDEZVOUS   the local launcher (below)
//   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE       mpirun (OpenMPI)
//   PMI_RANK, PMI_SIZE                               MPICH / Intel MPI
//   SLURM_PROCID, SLURM_NTASKS                       srun
//   RANK, WORLD_SIZE (+ MASTER_ADDR, MASTER_PORT)    torchrun, Kubernetes jobs
// Under an outer launcher rank 0 serves the rendezvous store at MASTER_ADDR:MASTER_PORT (else
// cluster.master_addr:master_port); the local launcher serves it itself and passes the address.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/net/security.h"
#include "tools/trainer/cluster_options.h"

namespace aiacc::trainer {

struct ProcessRole {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher;      // "local", "mpirun", "mpich", "srun", "torchrun"; empty: none
  std::string rendezvous;    // "host:port" of the rendezvous store
  bool serves_rendezvous = false;  // this process hosts the store (rank 0 under outer launchers)

  bool is_worker(const ClusterOptions& c) const { return rank < c.workers; }
  // "worker 1" or "server 0": how logs and errors name this process.
  std::string name(const ClusterOptions& c) const;
};

// The role the environment gives this process, or nullopt when no launcher started it. With
// cluster.launcher local only the local launcher's own variables count (AIACC_RANK: this
// process is one of its ranks). Throws ConfigError when the environment disagrees with `cluster` (world size, bad numbers),
// naming the variables.
std::optional<ProcessRole> role_from_environment(const ClusterOptions& cluster);

// The CURVE keys of this process's job traffic, or nullopt when cluster.security.curve is off.
// The token comes from AIACC_JOB_TOKEN or cluster.security.token_file (the local launcher
// passes its own in AIACC_JOB_TOKEN); without one, a ConfigError says how to provide it.
std::optional<net::CurveKeys> job_curve_keys(const ClusterOptions& cluster, const ProcessRole& role);

// Names rank r of a job with `cluster`: "worker r" or "server (r - workers)".
std::string rank_name(const ClusterOptions& cluster, int rank);

// Starts cluster.world_size() copies of this program (`argv`, /proc/self/exe) as local
// processes with the AIACC_* variables set, serves their rendezvous store, forwards SIGINT and
// SIGTERM, and waits. When one exits with a failure the others are stopped (SIGTERM, then
// SIGKILL after a grace period; SIGKILL at once when the ranks take SIGTERM as a request to
// checkpoint) and the returned message names the first to fail and how
// ("worker 1 (pid 1234) was killed by signal 9 (Killed)"). Returns the job's exit status: 0
// when all succeeded, 2 when any process exited 2 (a configuration error, which the first
// failure may have been only a consequence of), else the first failure's (128 + signal for a
// signal).
struct LaunchResult {
  int exit_status = 0;
  std::string failure;  // empty on success
  // Stopped by a signal (128 + signal), not failed: never restarted. With the ranks'
  // train.checkpoint.on_signal, after their checkpoint.
  bool stopped = false;
};
// Runs the job as local processes of this program (argv) and supervises them: one failing
// stops the others. With cluster.max_restarts > 0 a failed job (not one stopped by a signal,
// nor a configuration error: exit status 2, which would fail alike) is started again, up to that many times; every process then resumes from the newest
// complete checkpoint (train.checkpoint.resume: auto), so a crash loses at most the steps
// since it. Children see the attempt number in AIACC_RESTART_COUNT (0 for the first).
// Throws InternalError in a process a local launcher started (AIACC_RANK set).
// `ranks_stop_on_signal` (train.checkpoint.on_signal): the ranks take a forwarded SIGINT or
// SIGTERM as a request to checkpoint and exit, which takes a while: only a second signal is
// followed by SIGKILL after the grace period. The ranks then run in process groups of their
// own, so a terminal's Ctrl-C reaches them once, through this launcher, not twice.
LaunchResult launch_local(const ClusterOptions& cluster, const std::vector<std::string>& argv,
                          bool ranks_stop_on_signal = false);

inline constexpr const char* kRestartCountVariable = "AIACC_RESTART_COUNT";
// This process's attempt of its job under the local launcher (kRestartCountVariable): 0 for the
// first, or when the variable is unset or not a number.
int restart_attempt();

// Fault injection for tests: AIACC_TEST_KILL_AT=RANK:STEP[:kill|stop|term] makes process RANK
// kill itself (SIGKILL, as a crash would), freeze (SIGSTOP, as a hung host would) or send itself
// SIGTERM (a stop request that reaches it alone, as a preempted pod's would) after STEP: a
// worker after that step and its checkpoint, a shard on the first push of a later step. Only
// the first attempt of a job is hit (AIACC_RESTART_COUNT unset or 0), so a restart recovers.
struct InjectedFault {
  std::int64_t step = -1;
  int signal = 0;  // SIGKILL, SIGSTOP, or SIGTERM (":term": a stop request only this rank gets)
};
std::optional<InjectedFault> injected_fault(int rank);

}  // namespace aiacc::trainer
