// WakeSignal: an eventfd one thread sets to wake another sleeping in zmq_poll (which polls
// plain descriptors next to sockets: put {nullptr, fd(), ZMQ_POLLIN, 0} in the item list).
// Owns the descriptor (closed with the object). Used by the threads that serve sockets and
// must also react to requests from other threads: the PS client's I/O thread, the handshake
// watcher.
#pragma once

namespace aiacc::net {

class WakeSignal {
 public:
  WakeSignal();  // throws IoError when no eventfd can be created
  ~WakeSignal();
  WakeSignal(const WakeSignal&) = delete;
  WakeSignal& operator=(const WakeSignal&) = delete;

  // Makes fd() readable until clear(). Thread-safe. Throws IoError (it cannot fail in practice:
  // only a counter overflow would).
  void notify();
  // Consumes the pending notifications, if any. Call before looking at what was requested, so
  // a notify() in between wakes the next poll again.
  void clear() noexcept;

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace aiacc::net
