// ConnectionEvents: what a socket's monitor events mean for its genuine connections, by count.
// libzmq reports a connection refused in its handshake (an intruder, a port scanner, a peer
// with the wrong keys) first as a handshake failure, then as a disconnect of that same
// connection; such a disconnect is not a client's. Used by parameter-server shards (clients
// connected) and clients (shard reachable?); channels, which have one peer, tell connections
// apart by descriptor instead (Channel::drain_monitor).
#pragma once

#include <zmq.h>

#include "core/net/security.h"
#include "core/net/socket.h"

namespace aiacc::net {

class ConnectionEvents {
 public:
  enum class Meaning { other, up, down, refused };

  // The monitor events to subscribe to.
  static int events() {
    return ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | handshake_failure_events();
  }

  Meaning interpret(const MonitorEvent& e) {
    if (is_handshake_failure(e.event)) {
      ++refused_disconnects_due_;
      return Meaning::refused;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED) {
      if (refused_disconnects_due_ > 0) {
        --refused_disconnects_due_;
        return Meaning::other;
      }
      return Meaning::down;
    }
    if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return Meaning::up;
    return Meaning::other;
  }

 private:
  int refused_disconnects_due_ = 0;
};

}  // namespace aiacc::net
