// Mesh: binding, address parsing and the concurrent connect/accept handshake loop.
#include "core/net/mesh.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "core/error.h"
#include "core/net/detail/hello.h"
#include "core/net/security.h"

namespace aiacc::net {

namespace {

std::vector<int> resolve_peers(const MeshSpec& spec) {
  if (spec.world_size < 1) throw CommError(fmt::format("mesh: world size {} < 1", spec.world_size));
  if (spec.rank < 0 || spec.rank >= spec.world_size) {
    throw CommError(fmt::format("mesh: rank {} out of range for world size {}", spec.rank,
                                spec.world_size));
  }
  if (spec.streams < 1) throw CommError(fmt::format("mesh: streams {} < 1", spec.streams));
  std::vector<int> peers = spec.peers;
  if (peers.empty()) {
    for (int r = 0; r < spec.world_size; ++r) {
      if (r != spec.rank) peers.push_back(r);
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  for (int peer : peers) {
    if (peer < 0 || peer >= spec.world_size || peer == spec.rank) {
      throw CommError(fmt::format("mesh of rank {}: peer rank {} is out of range or itself "
                                  "(world size {})", spec.rank, peer, spec.world_size));
    }
  }
  return peers;
}

// One channel being established.
struct PendingLink {
  int peer;
  int stream;
  bool binds;           // we bound and wait for the peer's hello
  bool must_send;       // a hello (connect side) or accept (bind side) is still to be sent
  bool done = false;
  Socket socket;
};

// Sends a small control frame without blocking; false if the pipe is full (retry on POLLOUT).
bool try_send(Socket& socket, const std::string& payload) {
  for (;;) {
    if (zmq_send(socket.handle(), payload.data(), payload.size(), ZMQ_DONTWAIT) >= 0) return true;
    if (zmq_errno() == EAGAIN) return false;
    if (zmq_errno() != EINTR) socket.fail("zmq_send(mesh handshake)");
  }
}

// "rank 2 (dense ring stream 0, from rank 2 to this rank; listening on this rank's tcp://...)":
// a link in a start-up error, named as its own errors name it once the mesh is up (channel.cc).
std::string describe(const PendingLink& link, const StreamLabel& label) {
  return fmt::format("rank {} ({}; {} {})", link.peer, stream_name(label, link.peer, link.stream),
                     link.binds ? "listening on this rank's" : "connecting to", link.socket.endpoint());
}

detail::Hello receive_hello(Socket& socket) {
  Message message;
  while (zmq_msg_recv(message.raw(), socket.handle(), ZMQ_DONTWAIT) < 0) {
    if (zmq_errno() != EINTR) socket.fail("zmq_msg_recv(mesh handshake)");
  }
  return detail::decode_hello(message.bytes(), socket.endpoint());
}

}  // namespace

std::string stream_name(const StreamLabel& label, int peer, int stream) {
  return label ? label(peer, stream) : fmt::format("stream {}", stream);
}

bool parse_mesh_address(const std::string& entry, int& peer, int& stream, std::string& endpoint) {
  const auto colon = entry.find(':');
  const auto equals = entry.find('=');
  if (colon == std::string::npos || equals == std::string::npos || colon > equals) return false;
  const char* begin = entry.data();
  if (std::from_chars(begin, begin + colon, peer).ec != std::errc()) return false;
  if (std::from_chars(begin + colon + 1, begin + equals, stream).ec != std::errc()) return false;
  endpoint = entry.substr(equals + 1);
  return !endpoint.empty();
}

MeshListener::MeshListener(std::shared_ptr<Context> context, MeshSpec spec)
    : context_(std::move(context)), spec_(std::move(spec)) {
  spec_.peers = resolve_peers(spec_);
  for (int peer : spec_.peers) {
    if (peer < spec_.rank) continue;  // the lower rank of a pair binds
    for (int stream = 0; stream < spec_.streams; ++stream) {
      Socket socket = Channel::make_socket(context_, spec_.channel);
      const std::string endpoint = socket.bind(fmt::format("tcp://{}:*", spec_.interface));
      addresses_.push_back(fmt::format("{}:{}={}", peer, stream, endpoint));
      accepting_.emplace(std::make_pair(peer, stream), std::move(socket));
    }
  }
  if (spec_.hello_key) {
    nonce_ = generate_job_token();  // 32 random bytes in hex
    addresses_.push_back("nonce=" + nonce_);
  }
}

Mesh::Mesh(MeshListener listener, const AddressTable& table, Deadline deadline)
    : rank_(listener.spec_.rank),
      world_size_(listener.spec_.world_size),
      streams_(listener.spec_.streams),
      peers_(listener.spec_.peers),
      encrypted_(listener.context_->curve().has_value()),
      job_(listener.spec_.job),
      hello_key_(listener.spec_.hello_key),
      stream_label_(listener.spec_.stream_label) {
  const MeshSpec& spec = listener.spec_;
  const auto start = Clock::now();
  if (static_cast<int>(table.size()) != world_size_) {
    throw CommError(fmt::format("mesh of rank {}: address table has {} ranks, world size is {}",
                                rank_, table.size(), world_size_));
  }
  std::vector<PendingLink> links;
  std::map<int, std::string> peer_nonces;  // with a hello key: each binding peer's nonce
  // The nonce a link's proofs are bound to: the binder's.
  auto nonce_of = [&](const PendingLink& link) {
    return link.binds ? listener.nonce_ : peer_nonces.at(link.peer);
  };
  for (int peer : peers_) {
    for (int stream = 0; stream < streams_; ++stream) {
      if (peer > rank_) {
        links.push_back({peer, stream, true, false, false,
                         std::move(listener.accepting_.at({peer, stream}))});
        continue;
      }
      // The peer binds for us: find its entry for (our rank, stream).
      std::string endpoint;
      for (const auto& entry : table[peer]) {
        int entry_peer = -1;
        int entry_stream = -1;
        std::string entry_endpoint;
        if (parse_mesh_address(entry, entry_peer, entry_stream, entry_endpoint) &&
            entry_peer == rank_ && entry_stream == stream) {
          endpoint = entry_endpoint;
        }
      }
      if (endpoint.empty()) {
        throw CommError(fmt::format(
            "mesh of rank {}: rank {} publishes no address for its link with this rank ({}): its "
            "mesh peers or stream count differ from ours, or it is another job",
            rank_, peer, stream_name(peer, stream)));
      }
      Socket socket = Channel::make_socket(listener.context_, spec.channel);
      socket.connect(endpoint);
      links.push_back({peer, stream, false, true, false, std::move(socket)});
      if (spec.hello_key && !peer_nonces.count(peer)) {
        for (const auto& entry : table[peer]) {
          if (entry.rfind("nonce=", 0) == 0) peer_nonces[peer] = entry.substr(6);
        }
        if (!peer_nonces.count(peer)) {
          throw CommError(fmt::format("mesh of rank {}: rank {} publishes no handshake nonce (its "
                                      "security settings differ from ours)", rank_, peer));
        }
      }
    }
  }

  // Drive every handshake at once: waiting for peers one at a time could deadlock when two
  // ranks each wait for the other's hello on different links.
  std::size_t remaining = links.size();
  while (remaining > 0) {
    std::vector<zmq_pollitem_t> items;
    std::vector<PendingLink*> polled;
    for (auto& link : links) {
      if (link.done) continue;
      items.push_back({link.socket.handle(), 0,
                       static_cast<short>(link.must_send ? ZMQ_POLLOUT : ZMQ_POLLIN), 0});
      polled.push_back(&link);
    }
    const long timeout_ms = remaining_ms(deadline);
    if (timeout_ms == 0) {
      std::string missing;
      for (const PendingLink* link : polled) {
        missing += fmt::format("{}{}: {}", missing.empty() ? "" : ", ", describe(*link, stream_label_),
                               link->binds ? "no hello received" : "no answer to our hello");
      }
      throw TimeoutError(fmt::format("mesh of rank {} (job '{}'): timed out after {:.2f} s "
                                     "connecting to: {}",
                                     rank_, spec.job, seconds_since(start), missing));
    }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms) < 0) {
      if (zmq_errno() == EINTR) continue;
      throw CommError(fmt::format("mesh of rank {}: zmq_poll failed: {}", rank_,
                                  zmq_strerror(zmq_errno())));
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      PendingLink& link = *polled[i];
      if (items[i].revents == 0) continue;
      if (link.must_send) {
        detail::Hello hello{link.binds ? detail::Hello::kAccept : detail::Hello::kHello, rank_,
                            link.peer, link.stream, spec.job, "", ""};
        if (spec.hello_key) {
          hello.proof = detail::hello_proof(*spec.hello_key, hello.kind, rank_, link.peer, link.stream,
                                    spec.job, nonce_of(link));
        }
        if (!try_send(link.socket, detail::encode_hello(hello))) continue;
        link.must_send = false;
        if (link.binds) {
          link.done = true;
          --remaining;
        }
        continue;
      }
      const detail::Hello hello = receive_hello(link.socket);
      const bool matches = hello.from_rank == link.peer && hello.to_rank == rank_ &&
                           hello.stream == link.stream && hello.job == spec.job;
      if (spec.hello_key && hello.kind != detail::Hello::kReject &&
          !same_mac(hello.proof, detail::hello_proof(*spec.hello_key, hello.kind, hello.from_rank,
                                             hello.to_rank, hello.stream, hello.job,
                                             nonce_of(link)))) {
        // Not one of the job's processes (or a replayed handshake): refuse, say so, and count it.
        listener.context_->report_failed_handshake(link.socket.endpoint(), link.binds,
                                                   ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, 401);
        throw CommError(fmt::format(
            "mesh handshake: rank {} got a {} for its link with {} claiming to be rank {} that "
            "does not prove this job's token (a process outside the job, or another job's)",
            rank_, link.binds ? "hello" : "reply", describe(link, stream_label_), hello.from_rank));
      }
      if (link.binds) {
        if (hello.kind != detail::Hello::kHello || !matches) {
          const std::string reason = fmt::format(
              "rank {} expected a hello from rank {} ({}, job '{}') on {}, but got one from "
              "rank {} for rank {} (mesh stream {}, job '{}')",
              rank_, link.peer, stream_name(link.peer, link.stream), spec.job, link.socket.endpoint(),
              hello.from_rank, hello.to_rank, hello.stream, hello.job);
          // Best effort: tell the impostor why, so it fails fast instead of timing out.
          try_send(link.socket, detail::encode_hello({detail::Hello::kReject, rank_,
                                                      hello.from_rank, hello.stream, spec.job,
                                                      reason, ""}));
          throw CommError("mesh handshake: " + reason);
        }
        link.must_send = true;  // answer with an accept
        continue;
      }
      if (hello.kind == detail::Hello::kReject) {
        throw CommError(fmt::format("mesh handshake: rank {} rejected the hello of rank {} ({}; "
                                    "connecting to {}): {}",
                                    link.peer, rank_, stream_name(link.peer, link.stream),
                                    link.socket.endpoint(), hello.reason));
      }
      if (hello.kind != detail::Hello::kAccept || !matches) {
        throw CommError(fmt::format(
            "mesh handshake: rank {} connected to {} expecting rank {} ({}, job '{}'), but rank "
            "{} answered (mesh stream {}, job '{}')",
            rank_, link.socket.endpoint(), link.peer, stream_name(link.peer, link.stream), spec.job,
            hello.from_rank, hello.stream, hello.job));
      }
      link.done = true;
      --remaining;
    }
  }

  for (int peer : peers_) channels_[peer].reserve(streams_);
  for (auto& link : links) {
    // Links are ordered by (peer, stream), so each peer's vector is indexed by stream.
    channels_[link.peer]
        .emplace_back(std::move(link.socket), link.peer, link.stream, spec.channel)
        .set_stream_label(stream_name(link.peer, link.stream));
  }
}

Channel& Mesh::channel(int peer, int stream) {
  auto it = channels_.find(peer);
  AIACC_CHECK(it != channels_.end(), "rank {} has no channel to rank {} (peers: {})", rank_,
              peer, fmt::join(peers_, ", "));
  AIACC_CHECK(stream >= 0 && stream < streams_, "stream {} of {}", stream, streams_);
  return it->second[stream];
}

}  // namespace aiacc::net
