// A ZeroMQ context (the I/O threads every socket of this process uses), owned through
// std::shared_ptr because it is genuinely shared: each Socket keeps its context alive, so a
// context can never be terminated while one of its sockets is open (zmq_ctx_term would hang).
#pragma once

#include <memory>

namespace aiacc::net {

class Context {
 public:
  // `io_threads`: ZeroMQ background I/O threads. One moves ~3 GB/s over loopback TCP, which is
  // what one core sustains; more only help with many concurrent connections and spare cores.
  static std::shared_ptr<Context> create(int io_threads = 1);

  // Terminates the context. Blocks until lingering outgoing messages are sent or every socket's
  // linger time (ChannelOptions::linger_ms) has passed: bounded, never forever.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void* handle() const { return handle_; }

 private:
  explicit Context(void* handle) : handle_(handle) {}
  void* handle_;
};

}  // namespace aiacc::net
