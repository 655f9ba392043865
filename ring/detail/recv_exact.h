// recv_exact: the receive every collective uses. Both sides derive each message's size from
// the same buffer, dtype and plan, so a size that differs means the ranks disagree on them:
// reported as a CommError naming the peer, stream and step instead of a corrupt reduction.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/net/link.h"

namespace aiacc::ring::detail {

inline net::Message recv_exact(net::Link& link, std::size_t expected_bytes, net::Deadline deadline,
                               std::string_view what) {
  net::Message message = link.recv(deadline, what);
  if (message.size() != expected_bytes) link.throw_size_mismatch(message.size(), expected_bytes, what);
  return message;
}

}  // namespace aiacc::ring::detail
