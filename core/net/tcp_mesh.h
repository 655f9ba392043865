// TcpMesh: plain TCP links (tcp_link.h) to the peers of a connected Mesh, one per (peer,
// stream) as in the Mesh, set up through the Mesh's channels.
//
// Set-up, run by every rank of the mesh at the same time:
//   1. each rank listens on one OS-chosen port of `interface` and sends every higher peer its
//      address and a fresh random nonce over the mesh (stream 0), whose handshake already
//      proved the job (its token, or CURVE);
//   2. each rank connects to every lower peer once per stream and sends a hello, the mesh's own
//      handshake message (detail::Hello, framed by its length): its rank, the rank it expects,
//      the stream, the job with that peer's nonce and, when the mesh has a hello key (plain TCP
//      in a job with a token), the mesh's proof of them (detail::hello_proof);
//   3. each rank accepts its higher peers' connections and answers a hello that names it, a
//      stream not yet taken, its own nonce and a valid proof with an accept and its own proof;
//      anything else is refused, logged and closed (a scanner, a stale process, another job);
//   4. each rank waits for its lower peers' accepts and checks them.
// Lower ranks never wait for higher ones before accepting, so set-up cannot deadlock.
// The links carry bytes in the clear, like the mesh's channels without CURVE: whoever can read
// the network can read the gradients and the nonces. Communicator keeps CURVE meshes on their
// ZeroMQ channels.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "core/net/deadline.h"
#include "core/net/mesh.h"
#include "core/net/tcp_link.h"

namespace aiacc::net {

struct TcpMeshOptions {
  std::string interface = "127.0.0.1";  // address to listen on (numeric IPv4 or IPv6)
  // SO_SNDBUF / SO_RCVBUF per connection; 0 keeps the kernel's auto-tuning.
  std::int64_t send_buffer_bytes = 0;
  std::int64_t recv_buffer_bytes = 0;
  int spin_us = 0;  // TcpLink's spin before sleeping; set_spin_us changes it later
};

class TcpMesh {
 public:
  // Blocks until every link is connected and confirmed, or `deadline`: TimeoutError naming the
  // peers and streams still missing. CommError when a peer sends a malformed address. Errors
  // name the links' streams as the control mesh does (Mesh::stream_name), and so do the links'.
  TcpMesh(Mesh& control, const TcpMeshOptions& options, Deadline deadline);
  TcpMesh(TcpMesh&&) noexcept = default;  // links stay where they are (map nodes)
  TcpMesh& operator=(TcpMesh&&) noexcept = default;

  // The link to `peer` for `stream`; InternalError for one not in the mesh.
  TcpLink& link(int peer, int stream);
  void set_spin_us(int spin_us) { spin_us_->store(spin_us, std::memory_order_relaxed); }
  int spin_us() const { return spin_us_->load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<std::atomic<int>> spin_us_;
  std::map<std::pair<int, int>, TcpLink> links_;  // (peer, stream)
};

}  // namespace aiacc::net
