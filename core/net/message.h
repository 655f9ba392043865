// Message: the bytes of one received frame, owned in place. It holds the zmq_msg_t the
// transport decoded into, so consumers read (or reduce in place) straight from the transport's
// buffer with no extra copy. Move-only; the buffer is released on destruction.
#pragma once

#include <zmq.h>

#include <cstddef>
#include <span>

namespace aiacc::net {

class Message {
 public:
  Message() noexcept;  // an empty message (size 0)
  ~Message();
  Message(Message&& other) noexcept;
  Message& operator=(Message&& other) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  // Valid until this Message is destroyed or moved from (a move may relocate small messages,
  // which ZeroMQ stores inline). No alignment is guaranteed: small frames are views into the
  // transport's receive batch at arbitrary offsets, so read typed values with std::memcpy or
  // unaligned-tolerant loads (x86 vector loads are).
  std::span<const std::byte> bytes() const;
  // The same buffer, writable: the receiver owns it exclusively (e.g. reduce into it).
  std::span<std::byte> mutable_bytes();
  std::size_t size() const;
  bool empty() const { return size() == 0; }

  // For the transport: the underlying zmq_msg_t, to receive into.
  zmq_msg_t* raw() { return &msg_; }

 private:
  mutable zmq_msg_t msg_;  // zmq_msg_data/size take a non-const pointer but do not modify it
};

}  // namespace aiacc::net
