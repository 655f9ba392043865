// Link: the copying recv_into for transports that hand out their own buffers.
#include "core/net/link.h"

#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::net {

void Link::recv_into(std::span<std::byte> out, Deadline deadline, std::string_view what) {
  const Message message = recv(deadline, what);
  if (message.size() != out.size()) throw_size_mismatch(message.size(), out.size(), what);
  if (!out.empty()) std::memcpy(out.data(), message.bytes().data(), out.size());
}

std::string Link::stream_name() const {
  return stream_label_.empty() ? fmt::format("stream {}", stream()) : stream_label_;
}

void Link::throw_size_mismatch(std::size_t got, std::size_t expected, std::string_view what) const {
  throw CommError(fmt::format("{}: rank {} sent {} bytes ({}), expected {}: the ranks disagree on the "
                              "buffer size, dtype or wire type",
                              what, peer(), got, stream_name(), expected));
}

}  // namespace aiacc::net
