// Mesh: this rank's channels to its peers, `streams` (K >= 1) per peer, each handshaken.
// Built in two phases because addresses must be exchanged in between:
//
//   MeshListener listener(context, spec);        // binds sockets on OS-chosen ports
//   publish listener.addresses(), gather every rank's (rendezvous; see mesh_bootstrap.h)
//   Mesh mesh(std::move(listener), table, deadline);   // connects, handshakes
//   mesh.channel(peer, stream).send(...)
//
// Pairing is deterministic: for ranks a < b, a binds one socket per (b, stream) and b connects
// to it, so both sides agree which socket is which stream. The connecting rank sends a hello
// naming itself, the rank it expects, the stream and the job; the binder checks all four and
// answers accept or reject, so a miswired or foreign peer is a CommError naming both ranks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/net/address_table.h"
#include "core/net/channel.h"
#include "core/net/channel_options.h"
#include "core/net/context.h"
#include "core/net/deadline.h"
#include "core/net/security.h"

namespace aiacc::net {

// How errors name the link to `peer` for mesh stream `stream` to the user, as its owner knows
// it (ring/communicator.cc: "dense ring stream 0, from rank 2 to this rank", the configured
// stream and the direction, not the mesh's index).
using StreamLabel = std::function<std::string(int peer, int stream)>;
// `label`'s name for the link, or "stream N" (the mesh's numbering) without one.
std::string stream_name(const StreamLabel& label, int peer, int stream);

struct MeshSpec {
  int rank = 0;
  int world_size = 1;
  int streams = 1;         // channels per peer (K); buckets are split across them
  std::vector<int> peers;  // ranks to connect to; empty: every other rank. Must be symmetric
                           // (a lists b iff b lists a), e.g. ring neighbours.
  std::string job = "aiacc";           // identity checked in the handshake (e.g. a token hash)
  std::string interface = "127.0.0.1"; // address to bind on (a concrete address, never 0.0.0.0)
  ChannelOptions channel;
  // For meshes over plain TCP in a job with a token (CURVE off for speed): a 32-byte MAC key
  // (CurveKeys::hello_key). Every listener then publishes a fresh random nonce with its
  // addresses (through the rendezvous store, itself under CURVE), and each hello and accept
  // carries a MAC of its fields and that nonce: a process without the token cannot join, and a
  // captured hello is worth nothing in another mesh. Unset: no proofs (CURVE or trusted).
  std::optional<CurveKey> hello_key;
  // Names the links in start-up errors and labels the channels (Link::set_stream_label), and a
  // TcpMesh's links; unset: "stream N".
  StreamLabel stream_label;
};

// Phase 1: validates the spec and binds this rank's accepting sockets. Move-only.
class MeshListener {
 public:
  MeshListener(std::shared_ptr<Context> context, MeshSpec spec);

  // What to publish for this rank: one "peer:stream=endpoint" entry per accepting socket (and
  // "nonce=<hex>" with a hello key).
  const std::vector<std::string>& addresses() const { return addresses_; }
  const MeshSpec& spec() const { return spec_; }

 private:
  friend class Mesh;
  std::shared_ptr<Context> context_;
  MeshSpec spec_;
  std::map<std::pair<int, int>, Socket> accepting_;  // (peer, stream) -> bound socket
  std::vector<std::string> addresses_;
  std::string nonce_;  // hex; published as "nonce=<hex>" when spec.hello_key is set
};

// Phase 2 and the result: every channel connected and confirmed.
class Mesh {
 public:
  // Connects to the peers that bind for us (found in `table`, what every rank's listener
  // published) and accepts the others, all concurrently. Blocks until every channel is
  // handshaken or `deadline`: TimeoutError lists the links still missing (peer rank, stream as
  // spec.stream_label names it, address).
  // Throws CommError on a handshake from the wrong rank, stream or job (naming both sides),
  // or when a peer does not list us.
  Mesh(MeshListener listener, const AddressTable& table, Deadline deadline);
  Mesh(Mesh&&) noexcept = default;
  Mesh& operator=(Mesh&&) noexcept = default;

  // The channel to `peer` for `stream`; throws InternalError for a peer not in the mesh.
  // The lookup is thread-safe (the mesh never changes after construction). A Channel is not:
  // use each from one thread at a time; distinct channels may be used concurrently (one
  // thread per stream is the intended use). The reference lives as long as the Mesh.
  Channel& channel(int peer, int stream = 0);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int streams() const { return streams_; }
  const std::vector<int>& peers() const { return peers_; }
  // What the handshakes proved, for links set up through this mesh (tcp_mesh.h): whether the
  // channels are under CURVE, the spec's job and hello key.
  bool encrypted() const { return encrypted_; }
  const std::string& job() const { return job_; }
  const std::optional<CurveKey>& hello_key() const { return hello_key_; }
  // The spec's name for the link to `peer` for `stream` (stream_name()).
  std::string stream_name(int peer, int stream) const { return net::stream_name(stream_label_, peer, stream); }

 private:
  int rank_;
  int world_size_;
  int streams_;
  std::vector<int> peers_;
  bool encrypted_;
  std::string job_;
  std::optional<CurveKey> hello_key_;
  StreamLabel stream_label_;
  std::map<int, std::vector<Channel>> channels_;  // peer -> one channel per stream
};

// Parses a "peer:stream=endpoint" entry; nullopt-like false if it is not one.
bool parse_mesh_address(const std::string& entry, int& peer, int& stream, std::string& endpoint);

}  // namespace aiacc::net
