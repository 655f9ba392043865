// Context: creation with the I/O thread count, termination that retries EINTR.
#include "core/net/context.h"

#include <zmq.h>

#include <cerrno>

#include "core/check.h"
#include "core/log.h"

namespace aiacc::net {

std::shared_ptr<Context> Context::create(int io_threads) {
  AIACC_CHECK_GE(io_threads, 1);
  void* handle = zmq_ctx_new();
  if (handle == nullptr) {
    detail::throw_zmq_failure(__FILE__, __LINE__, "zmq_ctx_new()", zmq_errno());
  }
  try {
    AIACC_ZMQ_CHECK(zmq_ctx_set(handle, ZMQ_IO_THREADS, io_threads));
  } catch (...) {
    zmq_ctx_term(handle);
    throw;
  }
  return std::shared_ptr<Context>(new Context(handle));
}

Context::~Context() {
  // zmq_ctx_term can be interrupted by a signal; it must then be called again.
  while (zmq_ctx_term(handle_) == -1) {
    if (zmq_errno() == EINTR) continue;
    log::get("net")->warn("zmq_ctx_term failed: {}", zmq_strerror(zmq_errno()));
    break;
  }
}

}  // namespace aiacc::net
