#include "ring/halving_doubling_allreduce.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/stream_slices.h"

namespace aiacc::ring {
HalvingDoublingAllreduce::HalvingDoublingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec)
    : comm_(std::move(comm)),
      buffer_(buffer),
      spec_(spec),
      format_(detail::make_wire_format(buffer.dtype, WireType::kNative, "halving-doubling allreduce")),
      chunk_elements_(std::max<std::int64_t>(1, spec.chunk_bytes / static_cast<std::int64_t>(buffer.element_bytes()))),
      incoming_(buffer.bytes()) {
  AIACC_CHECK(buffer.count >= 0 && (buffer.data != nullptr || buffer.count == 0));
  if (spec.wire != WireType::kNative) {
    throw ConfigError(fmt::format("halving-doubling allreduce: sends native values only (wire {} asked for)",
                                  wire_type_name(spec.wire)));
  }
}

void HalvingDoublingAllreduce::run() {
  if (comm_->world_size() == 1 || buffer_.count == 0) return;
  const auto deadline = comm_->deadline();
  detail::run_on_stream_slices(*comm_, buffer_.count, buffer_.element_bytes(), timings_,
                               [&](int stream, Range slice) { run_stream(stream, slice, deadline); });
}

void HalvingDoublingAllreduce::run_stream(int stream, Range slice, net::Deadline deadline) {
  if (slice.size() == 0) return;
  const int n = comm_->world_size();
  const int rank = comm_->rank();
  const std::size_t element = buffer_.element_bytes();
  auto bytes_of = [&](Range r) {
    return std::span<std::byte>{buffer_.at(r.begin), static_cast<std::size_t>(r.size()) * element};
  };
  // The chunks of a half: partners split the same span at the same element, so the chunks one
  // posts are exactly the ones the other receives.
  // Each round posts a whole half before receiving: its chunks must fit the links' queues.
  const std::int64_t chunk_elements = comm_->chunk_elements_for_run(chunk_elements_, (slice.size() + 1) / 2);
  auto chunks = [&](Range r) { return (r.size() + chunk_elements - 1) / chunk_elements; };
  auto chunk = [&](Range r, std::int64_t c) {
    return Range{r.begin + c * chunk_elements, std::min(r.end, r.begin + (c + 1) * chunk_elements)};
  };
  auto label = [&](const char* phase, int mask) {
    return fmt::format("halving-doubling allreduce {} (stream {}, partner distance {})", phase, stream, mask);
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  if (rank >= p) {
    // Outside the power-of-two core: hand the slice to rank - p, receive the result from it.
    comm_->to(rank - p, stream).send(bytes_of(slice), deadline, label("fold into partner", p));
    comm_->from(rank - p, stream).recv_into(bytes_of(slice), deadline, label("result from partner", p));
    return;
  }
  std::byte* scratch = incoming_.data() + static_cast<std::size_t>(slice.begin) * element;
  if (rank + p < n) {
    // The folded slice arrives in one piece, and there is room for all of it from this
    // slice's start (the scratch spans the whole buffer).
    const std::span<std::byte> theirs{scratch, static_cast<std::size_t>(slice.size()) * element};
    comm_->from(rank + p, stream).recv_into(theirs, deadline, label("fold from partner", p));
    detail::accumulate(format_, buffer_.at(slice.begin), theirs.data(), static_cast<std::size_t>(slice.size()));
  }

  // Reduce-scatter: each round halves the span this rank reduces; the lower rank of a pair keeps
  // the lower half. Partners hold the same span in every round (it depends only on the bits
  // of earlier rounds, which they share), so they split it alike. Kept for the all-gather,
  // which retraces it. The nearest partner comes first, with the largest half: neighbouring
  // ranks are the ones most likely to share a host (or, bound r mod 2 on two cores, a cross-core
  // pair: 4 ranks, 4 MiB, 5.1-6.1 ms against 5.8-6.2 with the farthest partner first).
  std::vector<Range> parents;
  Range mine = slice;
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = rank ^ mask;
    const std::int64_t middle = mine.begin + mine.size() / 2;
    const bool low = (rank & mask) == 0;
    const Range keep = low ? Range{mine.begin, middle} : Range{middle, mine.end};
    const Range give = low ? Range{middle, mine.end} : Range{mine.begin, middle};
    net::Link& out = comm_->to(partner, stream);
    net::Link& in = comm_->from(partner, stream);
    const std::string what = label("reduce-scatter", mask);
    try {
      for (std::int64_t c = 0; c < chunks(give); ++c) out.post(bytes_of(chunk(give, c)), deadline, what);
      for (std::int64_t c = 0; c < chunks(keep); ++c) {
        const Range r = chunk(keep, c);
        const std::span<std::byte> theirs{scratch + static_cast<std::size_t>(r.begin - keep.begin) * element,
                                          static_cast<std::size_t>(r.size()) * element};
        in.recv_into(theirs, deadline, what);
        detail::accumulate(format_, buffer_.at(r.begin), theirs.data(), static_cast<std::size_t>(r.size()));
      }
      out.wait_posted(deadline, what);  // `give` is overwritten in the all-gather
    } catch (...) {
      out.abandon_posted();
      throw;
    }
    parents.push_back(mine);
    mine = keep;
  }
  if (spec_.op == ReduceOp::kAverage) {
    detail::scale(buffer_.dtype, buffer_.at(mine.begin), static_cast<std::size_t>(mine.size()), 1.0 / n);
  }

  // All-gather: the rounds in reverse; each rank sends what it holds and receives its partner's
  // half of the span they split, straight into place.
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = rank ^ mask;
    const Range parent = parents.back();
    parents.pop_back();
    const std::int64_t middle = parent.begin + parent.size() / 2;
    const Range theirs = (rank & mask) == 0 ? Range{middle, parent.end} : Range{parent.begin, middle};
    net::Link& out = comm_->to(partner, stream);
    net::Link& in = comm_->from(partner, stream);
    const std::string what = label("all-gather", mask);
    try {
      for (std::int64_t c = 0; c < chunks(mine); ++c) out.post(bytes_of(chunk(mine, c)), deadline, what);
      for (std::int64_t c = 0; c < chunks(theirs); ++c) in.recv_into(bytes_of(chunk(theirs, c)), deadline, what);
      out.wait_posted(deadline, what);
    } catch (...) {
      out.abandon_posted();
      throw;
    }
    mine = parent;
  }
  if (rank + p < n) {
    comm_->to(rank + p, stream).send(bytes_of(slice), deadline, label("result to partner", p));
  }
}

}  // namespace aiacc::ring
