// Internal to ps/: sending and receiving ZeroMQ multipart frames on the DEALER/ROUTER sockets
// of the parameter server. Sockets are created with unlimited high-water marks, so a send
// queues and never blocks (memory is bounded by the requests in flight, which the client caps
// through its timeouts). Bulk frames go without copies: either ZeroMQ takes a reference to a
// shared buffer (released from its I/O thread when written), or the bytes are produced straight
// into a ZeroMQ-allocated message.
#pragma once

#include <zmq.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/net/message.h"

namespace aiacc::ps::detail {

// A frame being built in ZeroMQ's own buffer (zmq_msg_init_size): fill data(), then send it.
class OutFrame {
 public:
  explicit OutFrame(std::size_t num_bytes);
  ~OutFrame() { zmq_msg_close(&msg_); }
  OutFrame(const OutFrame&) = delete;
  OutFrame& operator=(const OutFrame&) = delete;
  std::byte* data() { return static_cast<std::byte*>(zmq_msg_data(&msg_)); }
  std::size_t size() { return zmq_msg_size(&msg_); }
  // Sends and gives the buffer to ZeroMQ. Throws CommError naming `what`.
  void send(void* socket, bool more, std::string_view what);

 private:
  zmq_msg_t msg_;
};

// Sends `bytes` as one frame: copied when smaller than zero_copy_min_bytes (or it is -1),
// otherwise without a copy, ZeroMQ holding a reference to `owner` (which must own `bytes`)
// until it has written them. Throws CommError naming `what`.
void send_frame(void* socket, std::span<const std::byte> bytes,
                const std::shared_ptr<const void>& owner, bool more,
                std::int64_t zero_copy_min_bytes, std::string_view what);

// Receives one whole multipart message if one is queued (false otherwise), frames in order.
bool try_recv_parts(void* socket, std::vector<net::Message>& parts, std::string_view what);

template <class T>
std::span<const std::byte> byte_span(const std::vector<T>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T)};
}

// Reads a frame as T values: in place when aligned, else through `copy`.
template <class T>
std::span<const T> frame_as(std::span<const std::byte> frame, std::vector<T>& copy) {
  const std::size_t count = frame.size() / sizeof(T);
  if (reinterpret_cast<std::uintptr_t>(frame.data()) % alignof(T) == 0) {
    return {reinterpret_cast<const T*>(frame.data()), count};
  }
  copy.resize(count);
  if (count > 0) std::memcpy(copy.data(), frame.data(), count * sizeof(T));
  return {copy.data(), count};
}

}  // namespace aiacc::ps::detail
