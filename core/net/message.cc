// Message: lifetime of a zmq_msg_t (init, move, close).
#include "core/net/message.h"

namespace aiacc::net {

Message::Message() noexcept { zmq_msg_init(&msg_); }

Message::~Message() { zmq_msg_close(&msg_); }

Message::Message(Message&& other) noexcept {
  zmq_msg_init(&msg_);
  zmq_msg_move(&msg_, &other.msg_);  // leaves `other` empty; cannot fail for valid messages
}

Message& Message::operator=(Message&& other) noexcept {
  if (this != &other) zmq_msg_move(&msg_, &other.msg_);  // releases our old content first
  return *this;
}

std::span<const std::byte> Message::bytes() const {
  return {static_cast<const std::byte*>(zmq_msg_data(&msg_)), zmq_msg_size(&msg_)};
}

std::span<std::byte> Message::mutable_bytes() {
  return {static_cast<std::byte*>(zmq_msg_data(&msg_)), zmq_msg_size(&msg_)};
}

std::size_t Message::size() const { return zmq_msg_size(&msg_); }

}  // namespace aiacc::net
