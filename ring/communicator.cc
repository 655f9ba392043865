#include "ring/communicator.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string_view>

#include <unistd.h>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/net/mesh_bootstrap.h"
#include "core/util/cpus.h"

namespace aiacc::ring {

namespace {

// How rank `rank`'s ring `ring` names its mesh streams: mesh stream 2s carries stream s from
// the lower rank to the higher, 2s + 1 back (directed()).
net::StreamLabel ring_stream_label(int rank, std::string_view ring) {
  const std::string prefix = ring.empty() ? "ring" : fmt::format("{} ring", ring);
  return [rank, prefix](int peer, int mesh_stream) {
    const bool outgoing = (mesh_stream % 2 == 0) == (rank < peer);
    return outgoing ? fmt::format("{} stream {}, from this rank to rank {}", prefix, mesh_stream / 2, peer)
                    : fmt::format("{} stream {}, from rank {} to this rank", prefix, mesh_stream / 2, peer);
  };
}

}  // namespace

net::MeshSpec Communicator::make_mesh_spec(int rank, int world_size, const CommunicatorOptions& options,
                                           std::string job, std::string_view ring) {
  net::MeshSpec spec;
  spec.rank = rank;
  spec.world_size = world_size;
  spec.streams = 2 * options.streams;
  spec.job = std::move(job);
  spec.interface = options.interface;
  spec.channel = options.channel;
  spec.hello_key = options.hello_key;
  spec.stream_label = ring_stream_label(rank, ring);
  return spec;
}

std::shared_ptr<Communicator> Communicator::connect(std::shared_ptr<net::Context> context,
                                                    net::RendezvousClient& rendezvous, int rank,
                                                    int world_size, const CommunicatorOptions& options,
                                                    std::string_view name) {
  auto spec = make_mesh_spec(rank, world_size, options, fmt::format("ring/{}", name), name);
  auto mesh = net::connect_mesh(std::move(context), rendezvous, spec, fmt::format("ring-{}", name),
                                net::deadline_after(options.channel.connect_timeout_s));
  auto comm = std::make_shared<Communicator>(std::move(mesh), options);
  // Host topology: every rank publishes its host identity; equal identities share memory.
  const auto deadline = net::deadline_after(options.channel.connect_timeout_s);
  rendezvous.set_string(fmt::format("ring/{}/host/{}", name, rank), host_identity(), deadline);
  std::vector<std::string> identities;
  for (int r = 0; r < world_size; ++r) identities.push_back(rendezvous.get_string(fmt::format("ring/{}/host/{}", name, r), deadline));
  std::vector<int> hosts;
  std::map<std::string, int> host_ids;  // identity -> id, numbered by first rank
  for (const auto& identity : identities) {
    hosts.push_back(host_ids.emplace(identity, static_cast<int>(host_ids.size())).first->second);
  }
  comm->set_hosts(std::move(hosts));
  return comm;
}

std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  // The network namespace tells emulated hosts apart (tools/netemu); the PID namespace tells
  // apart containers sharing the host's network (a rank checks its local peers are alive by
  // pid, which means nothing across PID namespaces, and such containers rarely share
  // /dev/shm).
  auto namespace_of = [](const char* link) {
    char ns[128] = {};
    const ssize_t n = readlink(link, ns, sizeof ns - 1);
    return n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string();
  };
  return fmt::format("{}/{}/{}", name, namespace_of("/proc/self/ns/net"), namespace_of("/proc/self/ns/pid"));
}

std::int64_t Communicator::chunk_elements_for_run(std::int64_t configured, std::int64_t run_elements) const {
  configured = std::max<std::int64_t>(configured, 1);
  if (std::string_view(transport()) != "zmq") return configured;
  const std::int64_t max_messages =
      std::max<std::int64_t>(1, (std::int64_t{options_.channel.send_hwm} + options_.channel.recv_hwm) / 2);
  return std::max(configured, (run_elements + max_messages - 1) / max_messages);
}

void Communicator::set_hosts(std::vector<int> host_of_rank) {
  AIACC_CHECK(static_cast<int>(host_of_rank.size()) == world_size_, "{} host ids for {} ranks", host_of_rank.size(), world_size_);
  host_of_rank_ = std::move(host_of_rank);
  update_spin();
}

std::vector<int> Communicator::local_ranks() const {
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r) {
    if (host_of_rank_[static_cast<std::size_t>(r)] == host_of_rank_[static_cast<std::size_t>(rank_)]) out.push_back(r);
  }
  return out;
}

std::vector<int> Communicator::host_leaders() const {
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r) {
    const int host = host_of_rank_[static_cast<std::size_t>(r)];
    bool first = true;
    for (int q = 0; q < r && first; ++q) first = host_of_rank_[static_cast<std::size_t>(q)] != host;
    if (first) out.push_back(r);
  }
  return out;
}

Communicator::Communicator(net::Mesh mesh, const CommunicatorOptions& options)
    : mesh_(std::move(mesh)),
      options_(options),
      rank_(mesh_.rank()),
      world_size_(mesh_.world_size()),
      pool_(std::make_unique<StreamPool>(options.streams)),
      stream_weights_(static_cast<std::size_t>(options.streams), 1.0 / options.streams) {
  for (int r = 0; r < world_size_; ++r) host_of_rank_.push_back(r);
  if (world_size_ > 1 && mesh_.streams() != 2 * options.streams) {
    throw InternalError(fmt::format("ring communicator: the mesh has {} streams, {} streams need {}",
                                    mesh_.streams(), options.streams, 2 * options.streams));
  }
  if (mesh_.encrypted()) {
    if (options_.transport == "tcp") {
      throw ConfigError("transport tcp (cluster.ring.transport; aiacc-bench --transport) sends gradients "
                        "unencrypted, but this ring's connections use CURVE encryption: use zmq or auto, or plain "
                        "connections (cluster.security.encrypt_ring: false; aiacc-bench --curve off)");
    }
    options_.transport = "zmq";  // auto: only the ZeroMQ channels are encrypted
  }
  if (options_.transport != "zmq" && world_size_ > 1) {
    net::TcpMeshOptions tcp;
    tcp.interface = options.interface;
    tcp.send_buffer_bytes = options.channel.send_buffer_bytes;
    tcp.recv_buffer_bytes = options.channel.recv_buffer_bytes;
    tcp_ = std::make_unique<net::TcpMesh>(mesh_, tcp, net::deadline_after(options.channel.connect_timeout_s));
    // The ZeroMQ channels did their part (set-up): closing them frees their sockets' descriptors
    // (about four per channel with its monitor), which large worlds would otherwise run out of.
    // Every peer has read what we sent it before our links could be confirmed.
    for (int peer : mesh_.peers()) {
      for (int stream = 0; stream < mesh_.streams(); ++stream) mesh_.channel(peer, stream).close();
    }
    update_spin();
  }
}

void Communicator::update_spin() {
  if (!tcp_) return;
  int spin = options_.spin_us;
  if (spin < 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    // A container's CPU limit is shared by every rank in it: the cores this host's ranks can
    // keep busy at once, as for the affinity below.
    if (const auto limit = util::cgroup_cpu_limit()) online = std::min(online, static_cast<long>(util::cpus_within(*limit)));
    const auto known = static_cast<long>(util::allowed_cpus().size());
    const long allowed = known > 0 ? std::min(known, online) : online;  // unknown: assume all
    const long threads = static_cast<long>(local_ranks().size()) * options_.streams;
    // Ranks that outnumber the cores still spin briefly: measured with 4 ranks on 2 cores, 20 us
    // took 1-16 MiB 10-40% faster than sleeping at once (a woken rank waits for a core), where
    // 50 us held cores the others needed; 5 us against 20, alternating, bound or not: 1-16 KiB
    // 52-61 against 64-72 us, 64 KiB-1 MiB 10-25% faster, 4-16 MiB alike (within the noise).
    spin = threads <= online && options_.streams <= allowed ? 50 : 5;
  }
  tcp_->set_spin_us(spin);
}

net::Link& Communicator::directed(int peer, int stream, bool outgoing) {
  AIACC_CHECK(peer != rank_ && peer >= 0 && peer < world_size_, "peer {} of {} (rank {})", peer, world_size_, rank_);
  AIACC_CHECK(stream >= 0 && stream < streams(), "stream {} of {}", stream, streams());
  const int low = outgoing ? rank_ : peer;   // the sender
  const int high = outgoing ? peer : rank_;  // the receiver
  const int mesh_stream = 2 * stream + (low < high ? 0 : 1);
  if (tcp_) return tcp_->link(peer, mesh_stream);
  return mesh_.channel(peer, mesh_stream);
}

net::Link& Communicator::to(int peer, int stream) { return directed(peer, stream, true); }
net::Link& Communicator::from(int peer, int stream) { return directed(peer, stream, false); }

void Communicator::set_stream_weights(std::vector<double> weights) {
  AIACC_CHECK(static_cast<int>(weights.size()) == streams(), "{} weights for {} streams", weights.size(), streams());
  double total = 0;
  for (double w : weights) {
    AIACC_CHECK(std::isfinite(w) && w >= 0, "stream weight {}", w);
    total += w;
  }
  AIACC_CHECK(total > 0, "stream weights sum to {}", total);
  for (double& w : weights) w /= total;
  stream_weights_ = std::move(weights);
}

void Communicator::set_active_streams(int streams) {
  AIACC_CHECK(streams >= 1 && streams <= this->streams(), "{} active streams of {}", streams, this->streams());
  std::vector<double> weights(static_cast<std::size_t>(this->streams()), 0.0);
  for (int s = 0; s < streams; ++s) weights[static_cast<std::size_t>(s)] = 1.0;
  set_stream_weights(std::move(weights));
}

int Communicator::active_streams() const {
  return static_cast<int>(std::count_if(stream_weights_.begin(), stream_weights_.end(), [](double w) { return w > 0; }));
}

std::vector<Range> split_weighted(std::int64_t count, const std::vector<double>& weights, std::int64_t align) {
  AIACC_CHECK(!weights.empty() && align >= 1);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<Range> ranges(weights.size());
  // The rest goes to the last part with a positive weight: a stream switched off (weight 0)
  // gets nothing, not the rounding's tail, which would wake it for a ring of its own each run.
  std::size_t last = weights.size() - 1;
  while (last > 0 && !(weights[last] > 0)) --last;
  double cumulative = 0;
  std::int64_t begin = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    std::int64_t end = i >= last ? count : begin;
    if (i < last) {
      const auto ideal = static_cast<std::int64_t>(std::llround(static_cast<double>(count) * cumulative / total));
      end = std::clamp<std::int64_t>(ideal / align * align, begin, count);
    }
    ranges[i] = {begin, end};
    begin = end;
  }
  return ranges;
}

Range split_even(std::int64_t count, int parts, int index) {
  const std::int64_t base = count / parts, extra = count % parts;
  const std::int64_t begin = index * base + std::min<std::int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace aiacc::ring
