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

#include <optional>
#include <string>
#include <vector>

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

// The role the environment gives this process, or nullopt when no launcher started it.
// Throws ConfigError when the environment disagrees with `cluster` (world size, bad numbers),
// naming the variables.
std::optional<ProcessRole> role_from_environment(const ClusterOptions& cluster);

// Names rank r of a job with `cluster`: "worker r" or "server (r - workers)".
std::string rank_name(const ClusterOptions& cluster, int rank);

// Starts cluster.world_size() copies of this program (`argv`, /proc/self/exe) as local
// processes with the AIACC_* variables set, serves their rendezvous store, forwards SIGINT and
// SIGTERM, and waits. When one exits with a failure the others are stopped (SIGTERM, then
// SIGKILL after a grace period) and the returned message names the first to fail and how
// ("worker 1 (pid 1234) was killed by signal 9 (Killed)"). Returns the job's exit status: 0
// when all succeeded, else the first failure's (128 + signal for a signal).
struct LaunchResult {
  int exit_status = 0;
  std::string failure;  // empty on success
};
LaunchResult launch_local(const ClusterOptions& cluster, const std::vector<std::string>& argv);

}  // namespace aiacc::trainer
