#include "ring/recursive_doubling_allreduce.h"

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/recv_exact.h"

namespace aiacc::ring {

RecursiveDoublingAllreduce::RecursiveDoublingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, ReduceOp op)
    : comm_(std::move(comm)),
      buffer_(buffer),
      op_(op),
      format_(detail::make_wire_format(buffer.dtype, WireType::kNative, "recursive-doubling allreduce")) {}

void RecursiveDoublingAllreduce::run() {
  const int n = comm_->world_size();
  if (n == 1) return;
  const int rank = comm_->rank();
  const auto deadline = comm_->deadline();
  const std::span<const std::byte> bytes{buffer_.at(0), buffer_.bytes()};
  const auto count = static_cast<std::size_t>(buffer_.count);

  auto exchange = [&](int peer, const char* what, bool add) {
    net::Link& out = comm_->to(peer, 0);
    try {
      out.post(bytes, deadline, what);
      net::Message message = detail::recv_exact(comm_->from(peer, 0), bytes.size(), deadline, what);
      out.wait_posted(deadline, what);  // before the buffer changes under the transport
      if (add) detail::accumulate(format_, buffer_.data, message.bytes().data(), count);
    } catch (...) {
      out.abandon_posted();
      throw;
    }
  };
  auto send_only = [&](int peer, const char* what) {
    net::Link& out = comm_->to(peer, 0);
    out.send(bytes, deadline, what);
  };
  auto receive_into = [&](int peer, const char* what, bool add) {
    if (!add && !format_.converts()) {
      comm_->from(peer, 0).recv_into({buffer_.at(0), bytes.size()}, deadline, what);
      return;
    }
    net::Message message = detail::recv_exact(comm_->from(peer, 0), bytes.size(), deadline, what);
    if (add) {
      detail::accumulate(format_, buffer_.data, message.bytes().data(), count);
    } else {
      detail::decode(format_, buffer_.data, message.bytes().data(), count);
    }
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  if (rank >= p) {
    // Outside the power-of-two core: hand the data to rank - p, receive the result from it.
    send_only(rank - p, "recursive-doubling allreduce: fold into partner");
    receive_into(rank - p, "recursive-doubling allreduce: result from partner", false);
    return;
  }
  if (rank + p < n) receive_into(rank + p, "recursive-doubling allreduce: fold from partner", true);
  for (int mask = 1; mask < p; mask <<= 1) {
    exchange(rank ^ mask, "recursive-doubling allreduce: exchange", true);
  }
  if (op_ == ReduceOp::kAverage) detail::scale(buffer_.dtype, buffer_.data, count, 1.0 / n);
  if (rank + p < n) send_only(rank + p, "recursive-doubling allreduce: result to partner");
}

}  // namespace aiacc::ring
