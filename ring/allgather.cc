#include "ring/allgather.h"

#include <cstring>
#include <deque>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/recv_exact.h"

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
  std::deque<net::Message> held;
  try {
    out.post({base + static_cast<std::size_t>(rank) * block, block}, deadline, "allgather step 0");
    for (int step = 0; step < n - 1; ++step) {
      const int index = (rank - step - 1 + n) % n;
      net::Message message = detail::recv_exact(comm_->from(left, 0), block, deadline, fmt::format("allgather step {}", step));
      if (block > 0) std::memcpy(base + static_cast<std::size_t>(index) * block, message.bytes().data(), block);
      if (step < n - 2) {
        held.push_back(std::move(message));
        out.post(held.back().bytes(), deadline, fmt::format("allgather step {}", step + 1));
      }
    }
    out.wait_posted(deadline, "allgather: sending the last block");
  } catch (...) {
    out.abandon_posted();
    throw;
  }
}

}  // namespace aiacc::ring
