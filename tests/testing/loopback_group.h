// Workers of a job as threads of one test process, each with its own ProcessGroup on loopback
// (worker 0 serves the rendezvous store): the cluster and role each thread starts from.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <stdexcept>

#include <fmt/format.h>

#include "core/io/atomic_file.h"
#include "tools/trainer/process_group.h"

namespace aiacc::testing {

// A loopback port nothing listens on now, for worker 0's rendezvous store.
inline int free_port() {
  io::FileDescriptor fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("free_port: no loopback port");
  }
  return ntohs(address.sin_port);
}

// `workers` workers started by an outer launcher, without CURVE, whose collectives time out
// after `ring_timeout_s`.
inline trainer::ClusterOptions loopback_cluster(int workers, double ring_timeout_s) {
  trainer::ClusterOptions cluster;
  cluster.workers = workers;
  cluster.launcher = "external";
  cluster.start_timeout_s = 20;
  cluster.security.curve = false;
  cluster.ring.comm.timeout_s = ring_timeout_s;
  cluster.ring.comm.channel.connect_timeout_s = 20;
  return cluster;
}

inline trainer::ProcessRole loopback_role(int rank, int world, int port) {
  trainer::ProcessRole role;
  role.rank = rank;
  role.world_size = world;
  role.local_rank = rank;
  role.rendezvous = fmt::format("127.0.0.1:{}", port);
  role.serves_rendezvous = rank == 0;
  return role;
}

}  // namespace aiacc::testing
