#include "ring/ring_allreduce.h"

#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/recv_exact.h"
#include "ring/detail/stream_slices.h"

namespace aiacc::ring {
RingAllreduce::RingAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec, std::vector<int> members)
    : comm_(std::move(comm)),
      buffer_(buffer),
      spec_(spec),
      members_(std::move(members)),
      format_(detail::make_wire_format(buffer.dtype, spec.wire, "ring allreduce")),
      chunk_elements_(std::max<std::int64_t>(1, spec.chunk_bytes / static_cast<std::int64_t>(format_.wire_bytes()))) {
  AIACC_CHECK(buffer.count >= 0 && (buffer.data != nullptr || buffer.count == 0));
  if (members_.empty()) {
    for (int r = 0; r < comm_->world_size(); ++r) members_.push_back(r);
  }
  const auto me = std::find(members_.begin(), members_.end(), comm_->rank());
  AIACC_CHECK(me != members_.end(), "rank {} is not a member of its ring", comm_->rank());
  position_ = static_cast<int>(me - members_.begin());
  if (format_.converts() && members_.size() > 1) {
    scatter_stage_.resize(static_cast<std::size_t>(buffer.count) * format_.wire_bytes());
    gather_stage_.resize(scatter_stage_.size());
  }
}

void RingAllreduce::run() {
  if (members_.size() == 1 || buffer_.count == 0) return;
  const auto deadline = comm_->deadline();
  detail::run_on_stream_slices(*comm_, buffer_.count, buffer_.element_bytes(), timings_,
                               [&](int stream, Range slice) { run_stream(stream, slice, deadline); });
}

void RingAllreduce::run_stream(int stream, Range slice, net::Deadline deadline) {
  // Positions in the ring stand in for ranks below; `rank` is this rank's position.
  const int n = static_cast<int>(members_.size());
  const int rank = position_;
  const int right = members_[static_cast<std::size_t>((rank + 1) % n)];
  const int left = members_[static_cast<std::size_t>((rank + n - 1) % n)];
  net::Link& out = comm_->to(right, stream);
  net::Link& in = comm_->from(left, stream);
  const std::size_t wire_bytes = format_.wire_bytes();
  const bool converts = format_.converts();
  const double average = spec_.op == ReduceOp::kAverage ? 1.0 / n : 1.0;

  // Segment k of this stream's slice and its chunks, in elements relative to the whole buffer.
  auto segment = [&](int k) {
    const Range r = split_even(slice.size(), n, ((k % n) + n) % n);
    return Range{slice.begin + r.begin, slice.begin + r.end};
  };
  // Step 0 posts a whole segment before receiving: its chunks must fit the links' queues.
  const std::int64_t chunk_elements = comm_->chunk_elements_for_run(chunk_elements_, (slice.size() + n - 1) / n);
  auto chunks = [&](const Range& seg) { return (seg.size() + chunk_elements - 1) / chunk_elements; };
  auto chunk = [&](const Range& seg, std::int64_t c) {
    return Range{seg.begin + c * chunk_elements, std::min(seg.end, seg.begin + (c + 1) * chunk_elements)};
  };
  auto stage_at = [&](std::vector<std::byte>& stage, std::int64_t element) {
    return stage.data() + static_cast<std::size_t>(element) * wire_bytes;
  };
  // Posts elements `r` of the buffer (native) or of `stage` after converting them (which
  // reports overflow as non-finite wire values; the check after the collective catches them).
  auto post_chunk = [&](const Range& r, std::vector<std::byte>& stage, const std::string& label) {
    std::span<const std::byte> bytes;
    if (converts) {
      std::byte* wire = stage_at(stage, r.begin);
      detail::encode(format_, buffer_.at(r.begin), wire, static_cast<std::size_t>(r.size()));
      bytes = {wire, static_cast<std::size_t>(r.size()) * wire_bytes};
    } else {
      bytes = {buffer_.at(r.begin), static_cast<std::size_t>(r.size()) * wire_bytes};
    }
    out.post(bytes, deadline, label);
  };
  auto receive = [&](const Range& r, const std::string& label) {
    return detail::recv_exact(in, static_cast<std::size_t>(r.size()) * wire_bytes, deadline, label);
  };
  // Labels for errors, formatted once per step rather than per chunk.
  auto label = [](const char* phase, int step) { return fmt::format("ring allreduce {} step {}", phase, step); };

  // Kept alive until the end: all-gather forwards received chunks without copying them.
  std::deque<net::Message> forwarded;  // a deque: elements never move (small messages live inline)
  try {
    // Reduce-scatter: at step s this rank sends segment (rank - s) and receives (rank - s - 1),
    // adds its own values and passes the sum on at step s + 1; after n - 1 steps it holds the
    // full reduction of segment rank + 1.
    {
      const Range first = segment(rank);
      const std::string first_label = label("reduce-scatter", 0);
      for (std::int64_t c = 0; c < chunks(first); ++c) post_chunk(chunk(first, c), scatter_stage_, first_label);
    }
    for (int step = 0; step < n - 1; ++step) {
      const Range seg = segment(rank - step - 1);
      const bool last = step == n - 2;
      const std::string this_step = label("reduce-scatter", step);
      const std::string next_step = last ? label("all-gather", 0) : label("reduce-scatter", step + 1);
      for (std::int64_t c = 0; c < chunks(seg); ++c) {
        const Range r = chunk(seg, c);
        net::Message message = receive(r, this_step);
        detail::accumulate(format_, buffer_.at(r.begin), message.bytes().data(), static_cast<std::size_t>(r.size()));
        if (!last) {
          post_chunk(r, scatter_stage_, next_step);
          continue;
        }
        // This rank owns the segment: finish it and start the all-gather with it.
        if (average != 1.0) detail::scale(buffer_.dtype, buffer_.at(r.begin), static_cast<std::size_t>(r.size()), average);
        post_chunk(r, gather_stage_, next_step);
        if (converts) {
          // Round the owner's copy exactly as the others will see it.
          detail::decode(format_, buffer_.at(r.begin), stage_at(gather_stage_, r.begin), static_cast<std::size_t>(r.size()));
        }
      }
    }
    // All-gather: at step s this rank receives the finished segment (rank - s), stores it and
    // forwards the received bytes as they are.
    for (int step = 0; step < n - 1; ++step) {
      const Range seg = segment(rank - step);
      const std::string this_step = label("all-gather", step);
      const std::string next_step = label("all-gather", step + 1);
      for (std::int64_t c = 0; c < chunks(seg); ++c) {
        const Range r = chunk(seg, c);
        if (!converts) {
          // Straight into place, and forwarded from there. Safe: this rank's own sends of these
          // elements (reduce-scatter) were read by its right neighbour before the finished
          // values could come round from the left.
          const std::span<std::byte> place{buffer_.at(r.begin), static_cast<std::size_t>(r.size()) * wire_bytes};
          in.recv_into(place, deadline, this_step);
          if (step < n - 2) out.post(place, deadline, next_step);
          continue;
        }
        net::Message message = receive(r, this_step);
        detail::decode(format_, buffer_.at(r.begin), message.bytes().data(), static_cast<std::size_t>(r.size()));
        if (step < n - 2) {
          forwarded.push_back(std::move(message));
          out.post(forwarded.back().bytes(), deadline, next_step);
        }
      }
    }
    out.wait_posted(deadline, "ring allreduce: sending the last chunks");
  } catch (...) {
    // The transport may still read our buffers: drop those sends before they can be freed.
    out.abandon_posted();
    throw;
  }
}

}  // namespace aiacc::ring
