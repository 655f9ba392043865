#include "ring/hierarchical_allreduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {
namespace {

constexpr std::size_t kAlign = 4096;  // slots start on pages
// With more than two ranks on a host, each summing every slot itself pays only while all the
// chunks of one step fit in a core's cache.
constexpr std::int64_t kDirectHostBytes = 256 << 10;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec)
    : comm_(std::move(comm)), buffer_(buffer), spec_(spec), local_ranks_(comm_->local_ranks()) {
  if (spec.wire != WireType::kNative) {
    throw ConfigError("hierarchical allreduce: the wire type must be native (compression applies to the flat ring)");
  }
  detail::make_wire_format(buffer.dtype, WireType::kNative, "hierarchical allreduce");
  local_index_ = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), comm_->rank()) - local_ranks_.begin());
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::uint64_t sequence = comm_->next_sequence();
  chunk_elements_ = std::max<std::int64_t>(1, spec.chunk_bytes / static_cast<std::int64_t>(buffer.element_bytes()));
  // One host, two ranks (or a few ranks and small chunks): every rank sums all the slots of a
  // chunk itself, straight into its buffer. That takes one barrier per chunk instead of two and
  // no copy back, for reads that grow with the number of ranks (L chunks each instead of 2).
  const std::int64_t chunk_bytes = std::min(buffer.count, chunk_elements_) * static_cast<std::int64_t>(buffer.element_bytes());
  direct_ = local_size > 1 && comm_->host_leaders().size() == 1 &&
            (local_size == 2 || chunk_bytes * local_size <= kDirectHostBytes);
  // Direct: two sets of L chunk-sized slots, used alternately (see run()). Otherwise the result
  // and L slots, each of the whole buffer.
  slot_bytes_ = round_up(static_cast<std::size_t>(std::max<std::int64_t>(direct_ ? chunk_bytes : buffer.bytes(), 1)), kAlign);
  const std::size_t slots = direct_ ? 2 * static_cast<std::size_t>(local_size) : static_cast<std::size_t>(local_size + 1);
  slot_inputs_.resize(static_cast<std::size_t>(local_size));
  if (local_size > 1) {
    segment_.emplace(*comm_, local_ranks_, slot_bytes_ * slots, sequence, "hierarchical allreduce");
    result_ = segment_->data();
  } else {
    result_ = static_cast<std::byte*>(buffer.data);  // alone on the host: reduce in place
  }
  const int leader = local_ranks_.front();
  const auto leaders = comm_->host_leaders();
  if (comm_->rank() == leader && leaders.size() > 1) {
    AllreduceSpec sum = spec;
    sum.op = ReduceOp::kSum;
    leaders_ring_.emplace(comm_, Buffer{result_, buffer.count, buffer.dtype}, sum, leaders);
  }
}

std::byte* HierarchicalAllreduce::slot(int local) const {
  return segment_->data() + slot_bytes_ * static_cast<std::size_t>(local + 1);
}

std::byte* HierarchicalAllreduce::direct_slot(std::uint64_t generation, int local) const {
  const auto set = static_cast<std::size_t>(generation & 1);
  return segment_->data() + slot_bytes_ * (set * local_ranks_.size() + static_cast<std::size_t>(local));
}

void HierarchicalAllreduce::sum_slots(std::size_t offset, std::size_t count) {
  if (count == 0) return;
  for (std::size_t l = 0; l < slot_inputs_.size(); ++l) slot_inputs_[l] = slot(static_cast<int>(l)) + offset;
  detail::sum_scaled(buffer_.dtype, result_ + offset, slot_inputs_.data(), static_cast<int>(slot_inputs_.size()), count, 1.0);
}

void HierarchicalAllreduce::run() {
  if (comm_->world_size() == 1 || buffer_.count == 0) return;
  const auto deadline = comm_->deadline();
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::size_t element = buffer_.element_bytes();
  if (direct_) {
    // A chunk's slots are written again two chunks later, by which time every rank has passed
    // the barrier of the chunk in between, so has finished reading them.
    auto* data = static_cast<std::byte*>(buffer_.data);
    const double factor = spec_.op == ReduceOp::kAverage ? 1.0 / comm_->world_size() : 1.0;
    for (std::int64_t begin = 0; begin < buffer_.count; begin += chunk_elements_) {
      const auto size = static_cast<std::size_t>(std::min(chunk_elements_, buffer_.count - begin));
      std::byte* chunk = data + static_cast<std::size_t>(begin) * element;
      const std::uint64_t generation = ++generation_;
      std::memcpy(direct_slot(generation, local_index_), chunk, size * element);
      segment_->wait_all(generation, "inputs written", deadline);
      // The same sum, in local-rank order, on every rank: the results are bitwise equal.
      for (int l = 0; l < local_size; ++l) slot_inputs_[static_cast<std::size_t>(l)] = direct_slot(generation, l);
      detail::sum_scaled(buffer_.dtype, chunk, slot_inputs_.data(), local_size, size, factor);
    }
    return;
  }
  if (local_size > 1 && !leaders_ring_ && comm_->host_leaders().size() == 1) {
    // One host: nothing crosses the network, so the buffer is reduced in chunks that stay in
    // cache between being written, summed and read back (L + 1 copies of a chunk in flight).
    auto* data = static_cast<std::byte*>(buffer_.data);
    for (std::int64_t begin = 0; begin < buffer_.count; begin += chunk_elements_) {
      const std::int64_t size = std::min(chunk_elements_, buffer_.count - begin);
      const std::size_t at = static_cast<std::size_t>(begin) * element;
      std::memcpy(slot(local_index_) + at, data + at, static_cast<std::size_t>(size) * element);
      segment_->wait_all(++generation_, "inputs written", deadline);
      const Range part = split_even(size, local_size, local_index_);
      sum_slots(at + static_cast<std::size_t>(part.begin) * element, static_cast<std::size_t>(part.size()));
      segment_->wait_all(++generation_, "host sum", deadline);
      std::memcpy(data + at, result_ + at, static_cast<std::size_t>(size) * element);
    }
    if (spec_.op == ReduceOp::kAverage) {
      detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
    }
    return;
  }
  if (local_size > 1) {
    std::memcpy(slot(local_index_), buffer_.data, buffer_.bytes());
    segment_->wait_all(++generation_, "inputs written", deadline);
    // This rank's 1/L slice: the sum over slots in local-rank order.
    const Range slice = split_even(buffer_.count, local_size, local_index_);
    sum_slots(static_cast<std::size_t>(slice.begin) * element, static_cast<std::size_t>(slice.size()));
    segment_->wait_all(++generation_, "host sum", deadline);
  }
  if (leaders_ring_) leaders_ring_->run();
  if (local_size > 1) {
    if (leaders_ring_ || comm_->host_leaders().size() > 1) segment_->wait_all(++generation_, "leaders' exchange", deadline);
    std::memcpy(buffer_.data, result_, buffer_.bytes());
  }
  if (spec_.op == ReduceOp::kAverage) {
    detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
  }
}

}  // namespace aiacc::ring
