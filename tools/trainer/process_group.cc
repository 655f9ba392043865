#include "tools/trainer/process_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/net/peer_timeout_error.h"
#include "ps/server.h"
#include "ring/barrier.h"
#include "ring/broadcast.h"
#include "ring/wait_chain.h"

namespace aiacc::trainer {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The dotted key of line `i` of a block-style YAML text ("optimizer.lr"), from the lines
// above it with less indentation.
std::string yaml_key_path(const std::vector<std::string>& lines, std::size_t i) {
  auto indent = [](const std::string& l) { return l.find_first_not_of(' '); };
  auto key = [&](const std::string& l) {
    const auto start = indent(l), colon = l.find(':');
    return start == std::string::npos || colon == std::string::npos || colon < start
               ? std::string()
               : l.substr(start, colon - start);
  };
  std::string path = key(lines[i]);
  auto level = indent(lines[i]);
  for (std::size_t j = i; j-- > 0 && level != 0 && level != std::string::npos;) {
    const auto l = indent(lines[j]);
    if (l == std::string::npos || l >= level || lines[j][l] == '-' || lines[j][l] == '#') continue;
    path = key(lines[j]) + "." + path;
    level = l;
  }
  return path;
}

// The first lines where `a` and `b` differ, for an error message, by YAML key.
std::string first_differences(const std::string& a, const std::string& b, int limit = 3) {
  const auto la = lines_of(a), lb = lines_of(b);
  std::vector<std::string> out;
  const std::size_t n = std::max(la.size(), lb.size());
  for (std::size_t i = 0; i < n && static_cast<int>(out.size()) < limit; ++i) {
    const std::string x = i < la.size() ? la[i] : "(missing)";
    const std::string y = i < lb.size() ? lb[i] : "(missing)";
    if (x == y) continue;
    const std::string where = i < la.size() ? yaml_key_path(la, i) : std::string();
    out.push_back(fmt::format("{}: worker 0 has '{}', it has '{}'", where.empty() ? fmt::format("line {}", i + 1) : where,
                              x.substr(std::min(x.find_first_not_of(' '), x.size())),
                              y.substr(std::min(y.find_first_not_of(' '), y.size()))));
  }
  return fmt::format("{}", fmt::join(out, "; "));
}

std::string bind_host(const std::string& address, const ClusterOptions& cluster) {
  const std::string host = address.substr(0, address.rfind(':'));
  const char* master_addr = std::getenv("MASTER_ADDR");
  const bool from_env = master_addr != nullptr && *master_addr != '\0';
  return rendezvous_bind_host(from_env ? "MASTER_ADDR" : "cluster.master_addr", host, net::resolve_ipv4(host),
                              cluster.ring.comm.interface);
}

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// What a rank registers at the store: the kernel it runs on, which decides whose cores it
// shares (ProcessGroup::ranks_on_host), and its host name, for people (a duplicate rank's error
// shows it). The kernel, not the name: pods on one node and emulated hosts (network namespaces)
// have names or namespaces of their own, yet compete for the same cores.
std::vector<std::string> host_card() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return {fmt::format("kernel={}", boot_id.empty() ? name : boot_id), fmt::format("host={}", name)};
}

// Appended to a non-zero rank's timeout when rank 0's store never answered: under an outer
// launcher that is most often rank 0 itself, which failed before serving (its own log says why)
// or never started, not this rank's network.
std::string store_absent_hint(const ClusterOptions& cluster, const ProcessRole& role) {
  if (role.serves_rendezvous || role.launcher == "local") return "";
  return fmt::format(
      "; rank 0 serves that store as it starts, at MASTER_ADDR:MASTER_PORT (else cluster.master_addr:"
      "master_port), here {}, and nothing answered there within cluster.start_timeout_s ({:g} s): rank 0 may have "
      "failed to start (its log says why, e.g. the port in use or a config error) or not have been started, "
      "or the ranks were given different MASTER_ADDR or MASTER_PORT values",
      role.rendezvous, cluster.start_timeout_s);
}

}  // namespace

ProcessGroup::ProcessGroup(const ClusterOptions& cluster, const ProcessRole& role)
    : cluster_(cluster), role_(role), context_(net::Context::create(1, job_curve_keys(cluster, role))) {
  auto log = log::get("cluster");
  if (context_->curve() && role.rank == 0) {
    log->info("connections authenticated and encrypted with CURVE (job key fingerprint {})",
              context_->curve()->fingerprint());
  }
  const auto deadline = net::deadline_after(cluster.start_timeout_s);
  if (role.serves_rendezvous) {
    const std::string host = bind_host(role.rendezvous, cluster);
    try {
      rendezvous_server_ = std::make_unique<net::RendezvousServer>(context_, host, port_of(role.rendezvous));
    } catch (const CommError& e) {
      // The port is MASTER_PORT's (else cluster.master_port); the address is loopback for a
      // loopback MASTER_ADDR, else this rank's cluster.ring.interface.
      throw CommError(fmt::format("rank 0 cannot serve the rendezvous store on {}:{} (the port of MASTER_PORT, else "
                                  "cluster.master_port; {}): {}", host, port_of(role.rendezvous),
                                  net::is_loopback_ipv4(host) ? "the loopback address MASTER_ADDR resolves to"
                                                              : "the address of cluster.ring.interface",
                                  e.what()));
    }
    log->info("serving the rendezvous store on {}", rendezvous_server_->endpoint());
  }
  rendezvous_ = std::make_unique<net::RendezvousClient>(context_, role.rendezvous);
  const std::vector<std::string> card = host_card();
  try {
    rendezvous_->register_rank(role.rank, role.world_size, card, deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(e.what() + store_absent_hint(cluster, role));
  }
  const net::AddressTable table = rendezvous_->wait_all(deadline);
  ranks_on_host_ = static_cast<int>(std::count_if(
      table.begin(), table.end(), [&](const auto& other) { return !other.empty() && other.front() == card.front(); }));
  log->info("{} joined a job of {} workers and {} servers (launcher: {})", name(), cluster.workers,
            cluster.servers, role.launcher.empty() ? "none" : role.launcher);
  if (!is_worker()) return;

  // The dense ring: under CURVE like everything else, or, with encrypt_ring off, plain TCP
  // whose handshakes prove the token (its own context: CURVE is per context).
  auto dense_context = context_;
  ring::CommunicatorOptions dense_options = cluster.ring.comm;
  if (context_->curve() && !cluster.security.encrypt_ring) {
    dense_context = net::Context::create(1);
    dense_options.hello_key = context_->curve()->hello_key;
    if (role.rank == 0) {
      log->info("the dense ring runs unencrypted TCP (cluster.security.encrypt_ring: false); its "
                "handshakes prove the job token");
    }
  }
  // A listener that cannot bind (an address this host does not have) is the interface key's fault.
  const auto joining = [&](const char* ring, auto&& connect) {
    try {
      return connect();
    } catch (const net::PeerFailedError&) {
      throw;  // another rank's failure heard at the store: that rank's, not this one's interface
    } catch (const TimeoutError& e) {
      report_failure(e.what(), false);
      throw;
    } catch (const CommError& e) {
      const std::string message = fmt::format("{}: joining the {} ring on cluster.ring.interface {}: {}", name(),
                                              ring, cluster.ring.comm.interface, e.what());
      report_failure(message, false);  // the others wait for this rank at the store
      throw CommError(message);
    }
  };
  dense_ = joining("dense", [&] {
    return ring::Communicator::connect(dense_context, *rendezvous_, role.rank, cluster.workers, dense_options,
                                       "dense");
  });
  ring::CommunicatorOptions control_options = cluster.ring.comm;
  control_options.streams = 1;
  // Always under the job's context (CURVE when on): a tcp choice meant for the dense ring
  // (encrypt_ring: false) becomes auto here, which picks zmq under CURVE.
  if (control_options.transport == "tcp") control_options.transport = "auto";
  control_ = joining("control", [&] {
    return ring::Communicator::connect(context_, *rendezvous_, role.rank, cluster.workers, control_options,
                                       "control");
  });
}

std::shared_ptr<ps::PsClient> ProcessGroup::ps_client() {
  if (ps_client_ || cluster_.servers == 0) return ps_client_;
  AIACC_CHECK(is_worker(), "ps_client on a server");
  // Shards publish their endpoints once they serve (after the start-up checks).
  const auto deadline = net::deadline_after(cluster_.start_timeout_s);
  ps::ClientOptions client;
  for (int k = 0; k < cluster_.servers; ++k) {
    client.endpoints.push_back(rendezvous_->get_string(fmt::format("ps/endpoint/{}", k), deadline));
  }
  client.worker = role_.rank;
  client.timeout_s = cluster_.ps.timeout_s;
  client.retry_interval_s = std::min(10.0, cluster_.ps.timeout_s / 4);
  client.reconnect_grace_s = std::min(cluster_.ps.reconnect_grace_s, cluster_.ps.timeout_s);
  ps_client_ = std::make_shared<ps::PsClient>(client, context_);
  return ps_client_;
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::check(const std::string& what, const std::string& text, int ranks) {
  const auto deadline = net::deadline_after(cluster_.start_timeout_s);
  const std::string prefix = fmt::format("check/{}/{}", checks_++, what);
  rendezvous_->set_string(fmt::format("{}/{}", prefix, role_.rank), text, deadline);
  // A rank that never publishes its text (stopped, or stuck before the check) is named, not
  // only the store key it did not set.
  auto text_of = [&](int r) {
    try {
      return rendezvous_->get_string(fmt::format("{}/{}", prefix, r), deadline);
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("start-up check of the {}: {} did not report within cluster.start_timeout_s "
                                     "({:.0f} s): is its process stopped or stuck? ({})",
                                     what, rank_name(cluster_, r), cluster_.start_timeout_s, e.what()));
    }
  };
  const std::string reference = role_.rank == 0 ? text : text_of(0);
  std::vector<std::string> differing;
  std::string example;
  for (int r = 1; r < ranks; ++r) {
    // Its own text needs no store: when worker 0 fails this check and leaves, the store goes
    // with it, and the others would wait for it to the timeout instead of failing now.
    const std::string other = r == role_.rank ? text : text_of(r);
    if (other == reference) continue;
    differing.push_back(rank_name(cluster_, r));
    if (example.empty()) example = fmt::format("{}: {}", rank_name(cluster_, r), first_differences(reference, other));
  }
  if (!differing.empty()) {
    throw ConfigError(fmt::format("start-up check failed: the {} of {} differs from worker 0's ({})",
                                  what, fmt::join(differing, ", "), example));
  }
}

void ProcessGroup::check_agreement(const std::string& what, const std::string& text) {
  check(what, text, role_.world_size);
}

void ProcessGroup::check_worker_agreement(const std::string& what, const std::string& text) {
  AIACC_CHECK(is_worker(), "check_worker_agreement on a server");
  check(what, text, cluster_.workers);
}

void ProcessGroup::serve_shard(const std::function<int()>& stop_signal) {
  auto log = log::get("ps");
  ps::ServerOptions options;
  options.shard = role_.rank - cluster_.workers;
  options.num_shards = cluster_.servers;
  options.bind = fmt::format("tcp://{}:0", cluster_.ring.comm.interface);
  options.num_partitions = cluster_.ps.partitions;
  options.num_threads = cluster_.ps.threads;
  options.wait_timeout_s = cluster_.ps.timeout_s;
  options.expected_clients = cluster_.workers;  // every worker's PS client connects to every shard
  if (const auto fault = injected_fault(role_.rank)) {
    options.fault_after_step_for_testing = fault->step;
    options.fault_signal_for_testing = fault->signal;
  }
  ps::PsServer server(options, context_);
  rendezvous_->set_string(fmt::format("ps/endpoint/{}", options.shard), server.endpoint(),
                          net::deadline_after(cluster_.start_timeout_s));
  // The workers stop the shard when they are done. A worker that dies instead never will: when
  // a worker's connection has been gone for the grace period, the job is over for this shard too.
  bool stop_published = false;
  while (!server.wait_stopped(net::deadline_after(0.5))) {
    server.check();
    if (const int signal = stop_signal ? stop_signal() : 0; signal != 0 && !stop_published) {
      log->warn("shard {} got signal {} ({}): serving on until the workers have stopped at a step and saved "
                "their checkpoint", options.shard, signal, strsignal(signal));
      stop_published = true;
      try {
        rendezvous_->set_string(kShardStopKey, std::to_string(signal), net::deadline_after(kStopStoreTimeoutS));
      } catch (const net::PeerFailedError&) {
        throw;  // another rank failed and said so: that is the job's news, not a missing store
      } catch (const CommError& e) {
        // Its holder is gone (a killed launcher): the workers got their own signal then. This
        // loop goes on to its reconnect grace, which ends the shard once the workers are gone.
        log->warn("shard {}: could not tell the workers through the store ({}); serving on until they stop",
                  options.shard, e.what());
      }
    }
    const auto connections = server.connections();
    // The clients clamp the grace to timeout_s too (ps_client()): a shard waits no longer.
    if (connections.missing_s > std::min(cluster_.ps.reconnect_grace_s, cluster_.ps.timeout_s)) {
      const std::string reason = fmt::format(
          "ps shard {}: {} of the {} worker connections closed {:.1f} s ago and have not come back "
          "(a worker died or was stopped; cluster.ps.reconnect_grace_s)",
          options.shard, cluster_.workers - connections.open, cluster_.workers,
          connections.missing_s);
      // Tell the workers still waiting on this shard which worker it is waiting for.
      server.abort(reason);
      server.wait_stopped(net::deadline_after(2.0));
      throw CommError(reason + ": stopping this shard");
    }
  }
  server.check();
  log->info("shard {} shut down by the workers", options.shard);
}

int ProcessGroup::shard_stop_signal() {
  if (stop_store_gone_) return 0;
  try {
    const auto published = rendezvous_->lookup_string(kShardStopKey, net::deadline_after(kStopStoreTimeoutS));
    return published ? std::atoi(published->c_str()) : 0;
  } catch (const net::PeerFailedError&) {
    throw;  // another rank failed and said so at the store: the job ends with its error
  } catch (const CommError& e) {
    stop_store_gone_ = true;
    log::get("trainer")->warn("stop check: the store did not answer ({}); a shard's stop signal can no longer "
                              "reach the workers, their own still stops the job", e.what());
    return 0;
  }
}

ProcessGroup::CachedSum& ProcessGroup::cached_sum(DType dtype, std::int64_t words) {
  auto [it, fresh] = sums_.try_emplace({static_cast<int>(dtype), words});
  CachedSum& cached = it->second;
  if (fresh) {
    cached.words.assign(static_cast<std::size_t>(words), 0);
    ring::AllreduceTuning tuning;
    tuning.hierarchical = cluster_.ring.hierarchical;
    cached.allreduce = std::make_unique<ring::Allreduce>(
        control_, ring::Buffer{cached.words.data(), words, dtype}, ring::AllreduceSpec{}, tuning);
  }
  return cached;
}

void ProcessGroup::sum(std::span<double> values) {
  if (values.empty() || cluster_.workers == 1) return;
  CachedSum& cached = cached_sum(DType::f64, static_cast<std::int64_t>(values.size()));
  std::memcpy(cached.words.data(), values.data(), values.size_bytes());
  cached.allreduce->run();
  std::memcpy(values.data(), cached.words.data(), values.size_bytes());
}

std::vector<std::span<const std::byte>> ProcessGroup::allgather(std::span<const std::byte> mine) {
  const int n = cluster_.workers;
  if (n == 1) return {mine};
  if (cluster_.ring.hierarchical && ring::HostAllgather::applies(*control_)) {
    // Every worker on this host: through shared memory, read in place (built on first use,
    // which every worker reaches at the same collective).
    if (!host_allgather_) host_allgather_ = std::make_unique<ring::HostAllgather>(control_);
    return host_allgather_->run(mine);
  }
  // Across hosts: an all-gather as integer sums over zero-filled blocks (exact for any bytes),
  // so it takes the shared-memory path within each host. Each block is [size in bytes][data],
  // in a capacity every worker agrees on: usually one collective; when some block did not fit,
  // every worker sees that size, grows the capacity alike and runs it again.
  const auto own_bytes = static_cast<std::int64_t>(mine.size());
  for (;;) {
    const std::int64_t words = allgather_words_;
    CachedSum& blocks = cached_sum(DType::i64, (words + 1) * n);
    std::fill(blocks.words.begin(), blocks.words.end(), 0);
    std::int64_t* own = blocks.words.data() + (words + 1) * role_.rank;
    own[0] = own_bytes;
    if (own_bytes <= words * 8) std::memcpy(own + 1, mine.data(), mine.size());
    blocks.allreduce->run();
    std::int64_t largest = 0;
    for (int r = 0; r < n; ++r) {
      const std::int64_t size = blocks.words[static_cast<std::size_t>((words + 1) * r)];
      if (size < 0) throw CommError(fmt::format("allgather: rank {} sent a block of {} bytes", r, size));
      largest = std::max(largest, size);
    }
    if (largest > words * 8) {
      while (allgather_words_ * 8 < largest) allgather_words_ *= 2;
      continue;
    }
    std::vector<std::span<const std::byte>> out(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      const std::int64_t* block = blocks.words.data() + (words + 1) * r;
      out[static_cast<std::size_t>(r)] = {reinterpret_cast<const std::byte*>(block + 1), static_cast<std::size_t>(block[0])};
    }
    return out;
  }
}

void ProcessGroup::broadcast(Tensor& tensor, int root) {
  if (cluster_.workers == 1 || tensor.numel() == 0) return;
  explaining_timeouts(fmt::format("broadcasting worker {}'s tensor", root),
                      [&] { ring::Broadcast(control_, ring::Buffer::of(tensor), root).run(); });
}

void ProcessGroup::barrier() {
  if (cluster_.workers > 1) explaining_timeouts("at a job barrier", [&] { ring::barrier(*control_, "job barrier"); });
}

void ProcessGroup::explaining_timeouts(std::string_view operation, const std::function<void()>& collective) {
  try {
    collective();
  } catch (const TimeoutError& e) {
    // A worker waiting for a healthy neighbour (a broadcast's chain, a barrier's later rounds)
    // would otherwise blame it for the rank that stopped before it.
    const std::string message = fmt::format("{}: {}{}", operation, e.what(), explain_timeout(e, operation));
    if (const auto* waited = dynamic_cast<const net::PeerTimeoutError*>(&e)) {
      throw net::PeerTimeoutError(message, waited->peer());
    }
    throw TimeoutError(message);
  }
}

void ProcessGroup::report_failure(const std::string& message, bool config_error) noexcept {
  // Ranks waiting at the store poll it every 50 ms at most; those in a ring or shard operation
  // learn of the failure from the closed connections once this process exits.
  constexpr double kStoreLingerSeconds = 3.0;
  try {
    rendezvous_->abort(message, config_error, net::deadline_after(0.5));
    if (rendezvous_server_ && !rendezvous_server_->wait_abort_delivered(net::deadline_after(kStoreLingerSeconds))) {
      log::get("trainer")->info("not every rank waiting at the rendezvous store has heard of this failure within {} s",
                                kStoreLingerSeconds);
    }
  } catch (const std::exception& e) {
    log::get("trainer")->warn("could not tell the rendezvous store of this failure: {}", e.what());
  }
}

std::string ProcessGroup::explain_timeout(const TimeoutError& e, std::string_view operation) noexcept {
  if (!is_worker() || cluster_.workers < 2 || timeout_explained_) return "";
  timeout_explained_ = true;
  try {
    // The communicators number their ranks as the job does (workers first), so a link's peer
    // is the rank whose report to read.
    const auto* waited = dynamic_cast<const net::PeerTimeoutError*>(&e);
    const ring::WaitReport mine{waited != nullptr ? waited->peer() : -1, std::string(operation)};
    const std::string found = ring::exchange_wait_chain(*rendezvous_, role_.rank, mine, kWaitChainWindowS);
    return found.empty() ? found : "; " + found;
  } catch (const std::exception&) {
    return "";
  }
}

void ProcessGroup::finish() {
  if (!is_worker()) return;
  // After this barrier worker 0 shuts the shards down: no worker should warn of their exit.
  if (ps_client_) ps_client_->expect_shard_exits();
  barrier();
  if (role_.rank == 0 && cluster_.servers > 0) ps_client()->shutdown_servers();
}

std::string rendezvous_bind_host(const std::string& source, const std::string& host,
                                 const net::Ipv4Resolution& resolved, const std::string& interface) {
  const bool loopback = net::is_loopback_ipv4(resolved.address);
  if (loopback == net::is_loopback_ipv4(interface)) return loopback ? resolved.address : interface;
  if (loopback) {
    // Serving there would be unreachable from the other hosts, and serving on the interface
    // unreachable from this rank's own connection to `host`: either way a start timeout later.
    throw ConfigError(fmt::format(
        "{}={} resolves to the loopback address {} on rank 0's host, but cluster.ring.interface is {}: the other "
        "hosts could not reach the rendezvous store there (a host's own name resolves to 127.0.1.1 where /etc/hosts "
        "maps it so, as Debian and Ubuntu do); set {} to this host's address on the job's network (e.g. {}), or map "
        "the name to that address in /etc/hosts",
        source, host, resolved.address, interface, source, interface));
  }
  throw ConfigError(fmt::format(
      "{}={} is not loopback ({}), but cluster.ring.interface is {}: rank 0 would listen where the other hosts "
      "cannot reach it; set cluster.ring.interface to this host's address on the job's network",
      source, host,
      resolved.address.empty() ? fmt::format("it does not resolve here: {}", resolved.error)
                               : fmt::format("it resolves to {}", resolved.address),
      interface));
}

}  // namespace aiacc::trainer
