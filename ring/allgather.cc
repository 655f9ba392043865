#include "ring/allgather.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring {

Allgather::Allgather(std::shared_ptr<Communicator> comm, Buffer buffer) : comm_(std::move(comm)), buffer_(buffer) {
  if (buffer.count % comm_->world_size() != 0) {
    throw ConfigError(fmt::format("allgather: {} elements do not split into {} equal blocks", buffer.count,
                                  comm_->world_size()));
  }
}

void Allgather::run() {
  const int n = comm_->world_size();
  if (n == 1) return;
  const int rank = comm_->rank();
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  const auto deadline = comm_->deadline();
  const std::size_t block = buffer_.bytes() / static_cast<std::size_t>(n);
  auto* base = static_cast<std::byte*>(buffer_.data);
  net::Link& out = comm_->to(right, 0);
  try {
    out.post({base + static_cast<std::size_t>(rank) * block, block}, deadline, "allgather step 0");
    for (int step = 0; step < n - 1; ++step) {
      const int index = (rank - step - 1 + n) % n;
      // Received in place and forwarded from there (each block is written once, never changed).
      const std::span<std::byte> place{base + static_cast<std::size_t>(index) * block, block};
      comm_->from(left, 0).recv_into(place, deadline, fmt::format("allgather step {}", step));
      if (step < n - 2) out.post(place, deadline, fmt::format("allgather step {}", step + 1));
    }
    out.wait_posted(deadline, "allgather: sending the last block");
  } catch (...) {
    out.abandon_posted();
    throw;
  }
}

}  // namespace aiacc::ring
