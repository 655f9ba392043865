// Frame send/receive helpers for the parameter-server sockets.
#include "ps/detail/frames.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ps::detail {
namespace {

[[noreturn]] void fail(const char* call, std::string_view what) {
  const int error = zmq_errno();
  throw CommError(fmt::format("{} failed: {} (errno {}), during: {}", call, zmq_strerror(error),
                              error, what));
}

void send_msg(zmq_msg_t* msg, void* socket, bool more, std::string_view what) {
  for (;;) {
    if (zmq_msg_send(msg, socket, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) >= 0) return;
    if (zmq_errno() != EINTR) fail("zmq_msg_send", what);
  }
}

void release_owner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

}  // namespace

OutFrame::OutFrame(std::size_t num_bytes) {
  if (zmq_msg_init_size(&msg_, num_bytes) != 0) {
    zmq_msg_init(&msg_);
    fail("zmq_msg_init_size", "allocating a frame");
  }
}

void OutFrame::send(void* socket, bool more, std::string_view what) {
  send_msg(&msg_, socket, more, what);
}

void send_frame(void* socket, std::span<const std::byte> bytes,
                const std::shared_ptr<const void>& owner, bool more,
                std::int64_t zero_copy_min_bytes, std::string_view what) {
  zmq_msg_t msg;
  const bool zero_copy = owner != nullptr && zero_copy_min_bytes >= 0 &&
                         static_cast<std::int64_t>(bytes.size()) >= zero_copy_min_bytes &&
                         !bytes.empty();
  if (zero_copy) {
    auto* hint = new std::shared_ptr<const void>(owner);
    // ZeroMQ never writes through the pointer; the const_cast only satisfies its C API.
    if (zmq_msg_init_data(&msg, const_cast<std::byte*>(bytes.data()), bytes.size(), &release_owner,
                          hint) != 0) {
      delete hint;
      fail("zmq_msg_init_data", what);
    }
  } else {
    if (zmq_msg_init_size(&msg, bytes.size()) != 0) fail("zmq_msg_init_size", what);
    if (!bytes.empty()) std::memcpy(zmq_msg_data(&msg), bytes.data(), bytes.size());
  }
  try {
    send_msg(&msg, socket, more, what);
  } catch (...) {
    zmq_msg_close(&msg);  // a failed send leaves the message ours (releases `owner`)
    throw;
  }
}

bool try_recv_parts(void* socket, std::vector<net::Message>& parts, std::string_view what) {
  parts.clear();
  for (;;) {
    net::Message part;
    const int flags = parts.empty() ? ZMQ_DONTWAIT : 0;  // later parts are already queued
    if (zmq_msg_recv(part.raw(), socket, flags) < 0) {
      const int error = zmq_errno();
      if (error == EINTR) continue;
      if (error == EAGAIN && parts.empty()) return false;
      fail("zmq_msg_recv", what);
    }
    const bool more = zmq_msg_more(part.raw()) != 0;
    parts.push_back(std::move(part));
    if (!more) return true;
  }
}

}  // namespace aiacc::ps::detail
