// Communicator: what every CPU collective of one job shares. The ranks, a full mesh of
// core/net links (TCP links or ZeroMQ channels) with K streams per direction, the stream
// threads, the stream weights that split buffers across streams, and the timeout every
// collective's deadline derives from.
//
// Directed links: a message from rank a to rank b on stream s always travels on mesh stream
// 2s + (a < b ? 0 : 1), so each socket carries one direction only and the sending and the
// receiving side of a stream can be used from different threads (a ZeroMQ socket cannot).
//
// Transport (`transport`): the collectives run over plain TCP links (core/net/tcp_link.h) that
// their own threads read and write, set up through the ZeroMQ mesh, or over the mesh's ZeroMQ
// channels themselves. TCP is the default: with no I/O thread hand-off an 8-byte exchange
// takes a few us instead of ~50. ZeroMQ is kept for CURVE (the TCP links are not encrypted).
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/config/schema.h"
#include "core/net/channel_options.h"
#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/mesh.h"
#include "core/net/rendezvous_client.h"
#include "core/net/tcp_mesh.h"
#include "ring/stream_pool.h"

namespace aiacc::ring {

struct CommunicatorOptions {
  // Concurrent TCP connections per peer and direction (K). One stream is limited by one core's
  // copy rate and, in clouds, by per-flow rate caps; several fill the link.
  int streams = 1;
  // Every collective must finish within this many seconds (TimeoutError naming the peer and
  // operation otherwise). Generous: a collective may wait for a slow peer's backward pass.
  double timeout_s = 300.0;
  // Address this rank binds on (a concrete interface address).
  std::string interface = "127.0.0.1";
  net::ChannelOptions channel;
  // "tcp", "zmq", or "auto": tcp, unless the mesh's channels use CURVE (encryption), which only
  // the ZeroMQ channels provide (tcp with CURVE is a ConfigError).
  std::string transport = "auto";
  // TCP links: microseconds a wait polls before it sleeps (-1: auto, 50 when this host's ranks
  // times streams fit its CPUs and this rank's streams fit the CPUs it may use, else 5: a
  // longer spin would hold the core a peer needs).
  int spin_us = -1;
  // Not configured: set by the trainer when the ring runs plain TCP in a job with a token
  // (net::MeshSpec::hello_key), so the mesh handshake proves the token.
  std::optional<net::CurveKey> hello_key;

  template <class V>
  void visit(V& v) {
    v.field("streams", streams, "concurrent connections per peer (multi-stream)", config::in_range(1, 64));
    v.field("timeout_s", timeout_s, "seconds any collective may take before it fails", config::greater_than(0.0));
    v.field("interface", interface, "address to bind on", config::non_empty());
    v.field("net", channel, "channel options");
    v.field("transport", transport, "tcp (plain sockets, lowest latency) | zmq (ZeroMQ channels, CURVE) | auto",
            config::one_of({"auto", "tcp", "zmq"}));
    v.field("spin_us", spin_us, "tcp transport: us a wait polls before sleeping (-1: auto)", config::in_range(-1, 100000));
  }
};

class Communicator {
 public:
  // Takes a mesh over every other rank with 2 * streams mesh streams (see make_mesh_spec), and
  // with the tcp transport sets up its links through it (every rank at the same time). Links
  // are named in errors as the mesh's spec names them (make_mesh_spec: by ring stream).
  Communicator(net::Mesh mesh, const CommunicatorOptions& options);

  // The mesh spec a Communicator with `options` needs (for tests that build meshes directly).
  // Its errors, and its links' from then on, name each stream as the user knows it: "dense
  // ring stream 1, from rank 2 to this rank" (`ring`: the communicator's name, may be empty),
  // not as the mesh numbers it (2s + direction).
  static net::MeshSpec make_mesh_spec(int rank, int world_size, const CommunicatorOptions& options,
                                      std::string job, std::string_view ring = {});
  // Builds the mesh through the rendezvous store (every rank calls it with the same `name`)
  // and returns the communicator. Blocks until connected or options.channel.connect_timeout_s.
  static std::shared_ptr<Communicator> connect(std::shared_ptr<net::Context> context,
                                               net::RendezvousClient& rendezvous, int rank,
                                               int world_size, const CommunicatorOptions& options,
                                               std::string_view name);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int streams() const { return pool_->streams(); }
  const CommunicatorOptions& options() const { return options_; }

  // The link carrying this rank's messages to `peer` / from `peer` on `stream`.
  net::Link& to(int peer, int stream = 0);
  net::Link& from(int peer, int stream = 0);
  // "tcp" or "zmq": the transport the links use (a world of one has none, but says its choice).
  const char* transport() const { return options_.transport == "zmq" ? "zmq" : "tcp"; }

  // Chunk size in elements for an algorithm that posts a run of up to `run_elements` elements
  // to a peer, in chunks, before it receives from that peer (a ring's first segment, a
  // halving-doubling half): `configured`, or larger where a ZeroMQ link would otherwise hold
  // more unreceived messages than its high-water marks (send_hwm + recv_hwm, halved for the
  // next run that follows while the peer catches up) let queue; ranks that all block posting
  // would wait for each other until the timeout. TCP links queue any number. Equal on every
  // rank for equal runs.
  std::int64_t chunk_elements_for_run(std::int64_t configured, std::int64_t run_elements) const;

  // Which host each rank runs on (equal ids share memory; ids are 0, 1, ... by first rank).
  // connect() finds them from the hostname and network namespace; otherwise one host per rank
  // until set_hosts() (tests emulate hosts this way). Must be identical on every rank. Also
  // decides the TCP links' automatic spin.
  const std::vector<int>& host_of_rank() const { return host_of_rank_; }
  void set_hosts(std::vector<int> host_of_rank);
  // The ranks on this rank's host, ascending (this rank included); the lowest is its leader.
  std::vector<int> local_ranks() const;
  // The leader (lowest rank) of every host, ascending.
  std::vector<int> host_leaders() const;
  // Next value of a per-communicator sequence (names for shared-memory segments). Collective
  // objects are built in the same order on every rank, so the values agree.
  std::uint64_t next_sequence() { return sequence_++; }

  // A deadline for one collective started now.
  net::Deadline deadline() const { return net::deadline_after(options_.timeout_s); }
  StreamPool& pool() { return *pool_; }

  // Fractions of each buffer given to each stream; equal at start. Must be identical on every
  // rank (they decide the split): set only from values all ranks agree on (StreamBalancer).
  const std::vector<double>& stream_weights() const { return stream_weights_; }
  void set_stream_weights(std::vector<double> weights);
  // Uses the first `streams` streams with equal weights (the others carry nothing).
  void set_active_streams(int streams);
  int active_streams() const;

 private:
  net::Link& directed(int peer, int stream, bool outgoing);
  void update_spin();

  net::Mesh mesh_;
  std::unique_ptr<net::TcpMesh> tcp_;  // null with the zmq transport
  CommunicatorOptions options_;
  int rank_;
  int world_size_;
  std::unique_ptr<StreamPool> pool_;
  std::vector<double> stream_weights_;
  std::vector<int> host_of_rank_;
  std::uint64_t sequence_ = 0;
};

// This process's host identity: hostname and network namespace (emulated hosts share a
// hostname but not a namespace).
std::string host_identity();

// The element range [begin, end) of part `index` when `count` elements are split into `parts`
// pieces proportional to `weights` (parts = weights.size()), boundaries rounded to multiples of
// `align` elements. Deterministic: equal inputs give equal ranges on every rank.
struct Range {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
std::vector<Range> split_weighted(std::int64_t count, const std::vector<double>& weights, std::int64_t align);
// `parts` near-equal pieces (the first count % parts get one more element).
Range split_even(std::int64_t count, int parts, int index);

// Per stream, the bytes of a buffer it carried and the seconds it took in a collective's last
// run (what StreamBalancer weighs streams by).
struct StreamTimings {
  std::vector<std::int64_t> bytes;
  std::vector<double> seconds;
};

}  // namespace aiacc::ring
