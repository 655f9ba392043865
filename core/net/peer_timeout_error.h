// PeerTimeoutError: a TimeoutError that knows which peer rank the wait was for. Links (TcpLink,
// Channel) and the ring's shared-memory barriers throw it, so a caller can ask that rank what it
// was doing itself: a rank that times out waiting for a healthy neighbour, which waits in turn
// for a stopped rank, can then name the stopped one (ring/wait_chain.h).
#pragma once

#include <string>

#include "core/error.h"

namespace aiacc::net {

class PeerTimeoutError : public TimeoutError {
 public:
  PeerTimeoutError(const std::string& message, int peer) : TimeoutError(message), peer_(peer) {}

  // The rank (in the numbering of the mesh or communicator that waited) that sent nothing.
  int peer() const { return peer_; }

 private:
  int peer_;
};

}  // namespace aiacc::net
