#include "ring/allreduce.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {

Allreduce::Allreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec, AllreduceTuning tuning)
    : comm_(std::move(comm)), buffer_(buffer), spec_(spec) {
  detail::make_wire_format(buffer.dtype, spec.wire, "allreduce");  // validates before anything else
  const bool shared_hosts = comm_->host_leaders().size() < static_cast<std::size_t>(comm_->world_size());
  const bool one_host = comm_->host_leaders().size() == 1;
  const auto bytes = static_cast<std::int64_t>(buffer.bytes());
  const bool latency_bound = bytes < std::min(tuning.small_bytes, AllreduceTuning::kLatencyBoundBytes);
  const bool small = spec.wire == WireType::kNative ? bytes < tuning.small_bytes : latency_bound;
  // Shared memory beats any network algorithm within a host, for small buffers too (a few
  // microseconds instead of TCP round trips) as long as no network step follows.
  // A compressed wire applies to the rings between hosts only.
  if (tuning.hierarchical && shared_hosts && (!latency_bound || one_host)) {
    hierarchical_.emplace(comm_, buffer, spec);
    return;
  }
  if (small) {
    small_.emplace(comm_, buffer, spec.op);
    return;
  }
  const int world = comm_->world_size();
  const bool power_of_two = (world & (world - 1)) == 0;
  if (spec.wire == WireType::kNative && world > 2 && power_of_two && bytes < tuning.halving_doubling_bytes) {
    medium_.emplace(comm_, buffer, spec);
    return;
  }
  if (spec.wire == WireType::kNative) {
    ring_.emplace(comm_, buffer, spec);
    return;
  }
  // Compressed: the ring sums pre-scaled values; the fallback redoes the requested op in fp32.
  AllreduceSpec compressed = spec;
  compressed.op = ReduceOp::kSum;
  ring_.emplace(comm_, buffer, compressed);
  AllreduceSpec plain = spec;
  plain.wire = WireType::kNative;
  fallback_.emplace(comm_, buffer, plain);
  saved_input_.resize(buffer.bytes());
}

const char* Allreduce::algorithm() const {
  return small_ ? "recursive doubling" : medium_ ? "halving-doubling" : hierarchical_ ? "hierarchical" : "ring";
}

const StreamTimings& Allreduce::stream_timings() const {
  static const StreamTimings none;
  return medium_ ? medium_->stream_timings() : ring_ ? ring_->stream_timings() : none;
}

bool Allreduce::run() {
  if (hierarchical_) {
    if (!hierarchical_->run()) return false;
    note_fallback("this rank's ring between hosts");
    return true;
  }
  if (small_) {
    small_->run();
    return false;
  }
  if (medium_) {
    medium_->run();
    return false;
  }
  if (!fallback_) {
    ring_->run();
    return false;
  }
  const auto count = static_cast<std::size_t>(buffer_.count);
  if (comm_->world_size() == 1) {
    // Nothing travels: the sum of one rank is its input, exactly as in fp32.
    return false;
  }
  std::memcpy(saved_input_.data(), buffer_.data, buffer_.bytes());
  if (spec_.op == ReduceOp::kAverage) detail::scale(buffer_.dtype, buffer_.data, count, 1.0 / comm_->world_size());
  ring_->run();
  if (!detail::has_non_finite(buffer_.dtype, buffer_.data, count)) return false;
  note_fallback("the ring");
  std::memcpy(buffer_.data, saved_input_.data(), buffer_.bytes());
  fallback_->run();
  return true;
}

void Allreduce::note_fallback(std::string_view which) {
  ++fallbacks_;
  log::get("ring")->warn("allreduce of {} elements: the {} result of {} is not finite (overflow on the wire or "
                         "non-finite gradients); reducing it again in fp32 (fallback {} of this buffer on this rank)",
                         buffer_.count, wire_type_name(spec_.wire), which, fallbacks_);
}

}  // namespace aiacc::ring
