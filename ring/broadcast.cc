#include "ring/broadcast.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring {

Broadcast::Broadcast(std::shared_ptr<Communicator> comm, Buffer buffer, int root, std::int64_t chunk_bytes)
    : comm_(std::move(comm)), buffer_(buffer), root_(root), chunk_bytes_(std::max<std::int64_t>(1, chunk_bytes)) {
  if (root < 0 || root >= comm_->world_size()) {
    throw ConfigError(fmt::format("broadcast: root rank {} is outside the world of {}", root, comm_->world_size()));
  }
}

void Broadcast::run() {
  const int n = comm_->world_size();
  if (n == 1 || buffer_.count == 0) return;
  const int rank = comm_->rank();
  const int position = (rank - root_ + n) % n;
  const bool forwards = position < n - 1;
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
  const auto deadline = comm_->deadline();
  const auto total = static_cast<std::int64_t>(buffer_.bytes());
  const std::int64_t chunks = (total + chunk_bytes_ - 1) / chunk_bytes_;
  auto* base = static_cast<std::byte*>(buffer_.data);

  const std::string label = fmt::format("broadcast from root {}", root_);
  net::Link* out = forwards ? &comm_->to(next, 0) : nullptr;
  try {
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t begin = c * chunk_bytes_;
      const auto size = static_cast<std::size_t>(std::min(chunk_bytes_, total - begin));
      // Received in place and forwarded from there (each chunk is written once).
      const std::span<std::byte> bytes{base + begin, size};
      if (position > 0) comm_->from(previous, 0).recv_into(bytes, deadline, label);
      if (out) out->post(bytes, deadline, label);
    }
    if (out) out->wait_posted(deadline, "broadcast: sending the last chunks");
  } catch (...) {
    if (out) out->abandon_posted();
    throw;
  }
}

}  // namespace aiacc::ring
