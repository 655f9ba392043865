#include "ring/hierarchical_allreduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {
namespace {

constexpr std::size_t kAlign = 4096;  // slots start on pages
// Each rank summing every slot itself pays only while all the chunks of one step fit in a core's
// cache.
constexpr std::int64_t kDirectHostBytes = 256 << 10;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Calls f(offset, bytes) for each non-empty slice of `count` elements split evenly over `parts`
// local ranks, but slice `skip` (this rank's): the slices a rank hands to the others.
template <class F>
void for_other_slices(std::int64_t count, int parts, int skip, std::size_t element, F&& f) {
  for (int l = 0; l < parts; ++l) {
    if (l == skip) continue;
    const Range slice = split_even(count, parts, l);
    if (slice.size() > 0) f(static_cast<std::size_t>(slice.begin) * element, static_cast<std::size_t>(slice.size()) * element);
  }
}

}  // namespace

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec)
    : comm_(std::move(comm)), buffer_(buffer), spec_(spec), local_ranks_(comm_->local_ranks()) {
  detail::make_wire_format(buffer.dtype, spec.wire, "hierarchical allreduce");  // validates the pair
  local_index_ = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), comm_->rank()) - local_ranks_.begin());
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::uint64_t sequence = comm_->next_sequence();
  chunk_elements_ = std::max<std::int64_t>(1, spec.chunk_bytes / static_cast<std::int64_t>(buffer.element_bytes()));
  // On one host, where L chunks fit in 256 KiB, the direct path: every rank sums all L slots of
  // a chunk itself, straight into its buffer (one barrier a chunk, no copy back). Larger chunks
  // take the scattered path: each rank writes only the slices others sum and reads back only
  // the sums others made. With two ranks, 4 MiB took 520-570 us direct and 250-300 scattered
  // (OpenMPI's shared memory: 390-480), where reading a whole chunk the peer had just written
  // out of its cache cost more than the barriers saved.
  const std::int64_t chunk_bytes = std::min(buffer.count, chunk_elements_) * static_cast<std::int64_t>(buffer.element_bytes());
  const bool one_host = local_size > 1 && comm_->host_leaders().size() == 1;
  path_ = local_size == 1 ? HostPath::alone
          : !one_host     ? HostPath::across_hosts
          : chunk_bytes * local_size <= kDirectHostBytes ? HostPath::direct
                                                         : HostPath::scattered;
  // Direct: two sets of L chunk-sized slots, used alternately. Scattered: per set, L
  // chunk-sized slots and a chunk-sized result; two sets (by chunk parity) where the buffer has
  // several chunks, else one. Across hosts: the result and L slots, each of the whole buffer.
  slot_bytes_ = round_up(static_cast<std::size_t>(std::max<std::int64_t>(one_host ? chunk_bytes : buffer.bytes(), 1)), kAlign);
  const int scattered_sets = buffer.count > chunk_elements_ ? 2 : 1;
  const auto slots = static_cast<std::size_t>(path_ == HostPath::direct      ? 2 * local_size
                                              : path_ == HostPath::scattered ? scattered_sets * (local_size + 1)
                                                                             : local_size + 1);
  slot_inputs_.resize(static_cast<std::size_t>(local_size));
  if (local_size > 1) {
    segment_.emplace(*comm_, local_ranks_, slot_bytes_ * slots, sequence, "hierarchical allreduce");
    result_ = segment_->data();
  } else {
    result_ = static_cast<std::byte*>(buffer.data);  // alone on the host: reduce in place
  }
  const int leader = local_ranks_.front();
  const auto leaders = comm_->host_leaders();
  // Only the rings between hosts use a compressed wire: within a host the sums are exact.
  const bool compressed = spec.wire != WireType::kNative && leaders.size() > 1;
  prescaled_ = compressed && spec.op == ReduceOp::kAverage;
  AllreduceSpec sum = spec;
  sum.op = ReduceOp::kSum;
  AllreduceSpec native_sum = sum;
  native_sum.wire = WireType::kNative;
  if (path_ == HostPath::across_hosts) {
    if (auto members = slice_ring_members(); !members.empty()) {
      // Every local rank runs the ring between hosts on its own slice of the host's sum.
      path_ = HostPath::across_hosts_sliced;
      const Range slice = split_even(buffer.count, local_size, local_index_);
      const Buffer region{result_ + static_cast<std::size_t>(slice.begin) * buffer.element_bytes(), slice.size(), buffer.dtype};
      slice_ring_.emplace(comm_, region, sum, members);
      if (compressed) {
        slice_fallback_.emplace(comm_, region, native_sum, std::move(members));
        saved_ring_input_.resize(region.bytes());
      }
      return;
    }
  }
  if (comm_->rank() == leader && leaders.size() > 1) {
    const Buffer region{result_, buffer.count, buffer.dtype};
    leaders_ring_.emplace(comm_, region, sum, leaders);
    if (compressed) {
      leaders_fallback_.emplace(comm_, region, native_sum, leaders);
      saved_ring_input_.resize(region.bytes());
    }
  }
}

bool HierarchicalAllreduce::run_between_hosts(RingAllreduce& ring, std::optional<RingAllreduce>& fallback) {
  if (!fallback) {
    ring.run();
    return false;
  }
  // As Allreduce does for the flat ring: an average is pre-scaled so that the partial sums stay
  // within the wire type's range, and a result that is not finite is redone in fp32 from the
  // saved input. Every member of a ring holds the same bits, so they all decide alike; each
  // slice's ring decides for its own slice.
  const Buffer& region = ring.buffer();
  const auto count = static_cast<std::size_t>(region.count);
  if (prescaled_) detail::scale(region.dtype, region.data, count, 1.0 / comm_->world_size());
  std::memcpy(saved_ring_input_.data(), region.data, region.bytes());
  ring.run();
  if (!detail::has_non_finite(region.dtype, region.data, count)) return false;
  std::memcpy(region.data, saved_ring_input_.data(), region.bytes());
  fallback->run();
  return true;
}

std::vector<int> HierarchicalAllreduce::slice_ring_members() const {
  // Hosts in the order of their leaders, each host's ranks in rank order.
  const auto& host_of_rank = comm_->host_of_rank();
  std::vector<std::vector<int>> hosts;
  for (int leader : comm_->host_leaders()) {
    std::vector<int>& ranks = hosts.emplace_back();
    for (int r = 0; r < comm_->world_size(); ++r) {
      if (host_of_rank[static_cast<std::size_t>(r)] == host_of_rank[static_cast<std::size_t>(leader)]) ranks.push_back(r);
    }
    if (ranks.size() != local_ranks_.size()) return {};  // uneven hosts: the leaders' ring
  }
  std::vector<int> members;
  for (const auto& ranks : hosts) members.push_back(ranks[static_cast<std::size_t>(local_index_)]);
  return members;
}

std::byte* HierarchicalAllreduce::slot(int local) const {
  return segment_->data() + slot_bytes_ * static_cast<std::size_t>(local + 1);
}

std::byte* HierarchicalAllreduce::direct_slot(std::uint64_t generation, int local) const {
  const auto set = static_cast<std::size_t>(generation & 1);
  return segment_->data() + slot_bytes_ * (set * local_ranks_.size() + static_cast<std::size_t>(local));
}

std::byte* HierarchicalAllreduce::scattered_slot(std::int64_t chunk, int local) const {
  const auto set = static_cast<std::size_t>(chunk & 1);
  return segment_->data() + slot_bytes_ * (set * (local_ranks_.size() + 1) + static_cast<std::size_t>(local));
}

std::byte* HierarchicalAllreduce::scattered_result(std::int64_t chunk) const {
  return scattered_slot(chunk, static_cast<int>(local_ranks_.size()));
}

void HierarchicalAllreduce::run_scattered(net::Deadline deadline) {
  // A reduce-scatter and all-gather through the segment, pipelined over chunks: in step e a
  // rank writes the slices of chunk e that other ranks sum, sums its own slice of chunk e - 1
  // (its input read straight from its buffer) into the shared result, and copies the other
  // slices of chunk e - 2 out of it; then one barrier. Each rank moves (L - 1) / L of a chunk in
  // and out, instead of all of it. A set of slots (by chunk parity) is written again two steps
  // after its chunk was written, when every rank has passed the barrier after summing it.
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::size_t element = buffer_.element_bytes();
  auto* data = static_cast<std::byte*>(buffer_.data);
  const double factor = spec_.op == ReduceOp::kAverage ? 1.0 / comm_->world_size() : 1.0;
  const std::int64_t chunks = (buffer_.count + chunk_elements_ - 1) / chunk_elements_;
  auto chunk_size = [&](std::int64_t c) { return std::min(chunk_elements_, buffer_.count - c * chunk_elements_); };
  auto chunk_data = [&](std::int64_t c) { return data + static_cast<std::size_t>(c * chunk_elements_) * element; };
  for (std::int64_t step = 0; step < chunks + 2; ++step) {
    if (step < chunks) {
      std::byte* mine = scattered_slot(step, local_index_);
      for_other_slices(chunk_size(step), local_size, local_index_, element,
                       [&](std::size_t at, std::size_t bytes) { std::memcpy(mine + at, chunk_data(step) + at, bytes); });
    }
    if (step >= 1 && step <= chunks) {
      const std::int64_t c = step - 1;
      const Range slice = split_even(chunk_size(c), local_size, local_index_);
      const std::size_t at = static_cast<std::size_t>(slice.begin) * element;
      for (int l = 0; l < local_size; ++l) {
        slot_inputs_[static_cast<std::size_t>(l)] = (l == local_index_ ? chunk_data(c) : scattered_slot(c, l)) + at;
      }
      if (slice.size() > 0) {
        // Into the shared result and this rank's own buffer at once (its input there is read
        // before each sum is stored over it).
        detail::sum_scaled_and_copy(buffer_.dtype, scattered_result(c) + at, chunk_data(c) + at, slot_inputs_.data(),
                                    local_size, static_cast<std::size_t>(slice.size()), factor);
      }
    }
    if (step >= 2) {
      const std::int64_t c = step - 2;
      const std::byte* result = scattered_result(c);
      for_other_slices(chunk_size(c), local_size, local_index_, element,
                       [&](std::size_t at, std::size_t bytes) { std::memcpy(chunk_data(c) + at, result + at, bytes); });
    }
    // No barrier after the last step, which only reads results: the next run's first step
    // writes slots only, whose last reads came before this run's last barrier, and its first
    // result comes after a barrier.
    if (step < chunks + 1) segment_->wait_all(++generation_, "slices and sums written", deadline);
  }
}

bool HierarchicalAllreduce::run_sliced(net::Deadline deadline) {
  // Each rank writes the slices other local ranks own, sums its own slice of the host (its
  // input read from its buffer) into the shared result, runs the ring between hosts on that
  // slice with the ranks of the same local index, and after a barrier copies every slice out.
  // Slots are written again in the next run before its first barrier, when no rank reads them
  // any more; the result after that barrier, once every rank has copied this run's out.
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::size_t element = buffer_.element_bytes();
  auto* data = static_cast<std::byte*>(buffer_.data);
  std::byte* my_slot = slot(local_index_);
  for_other_slices(buffer_.count, local_size, local_index_, element,
                   [&](std::size_t at, std::size_t bytes) { std::memcpy(my_slot + at, data + at, bytes); });
  segment_->wait_all(++generation_, "inputs written", deadline);
  const Range mine = split_even(buffer_.count, local_size, local_index_);
  const std::size_t at = static_cast<std::size_t>(mine.begin) * element;
  for (int l = 0; l < local_size; ++l) {
    slot_inputs_[static_cast<std::size_t>(l)] = (l == local_index_ ? data : slot(l)) + at;
  }
  if (mine.size() > 0) {
    detail::sum_scaled(buffer_.dtype, result_ + at, slot_inputs_.data(), local_size, static_cast<std::size_t>(mine.size()), 1.0);
  }
  const bool fell_back = run_between_hosts(*slice_ring_, slice_fallback_);
  segment_->wait_all(++generation_, "slices reduced between hosts", deadline);
  std::memcpy(data, result_, buffer_.bytes());
  if (spec_.op == ReduceOp::kAverage && !prescaled_) {
    detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
  }
  return fell_back;
}

void HierarchicalAllreduce::sum_slots(std::size_t offset, std::size_t count) {
  if (count == 0) return;
  for (std::size_t l = 0; l < slot_inputs_.size(); ++l) slot_inputs_[l] = slot(static_cast<int>(l)) + offset;
  detail::sum_scaled(buffer_.dtype, result_ + offset, slot_inputs_.data(), static_cast<int>(slot_inputs_.size()), count, 1.0);
}

bool HierarchicalAllreduce::run() {
  if (comm_->world_size() == 1 || buffer_.count == 0) return false;
  const auto deadline = comm_->deadline();
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::size_t element = buffer_.element_bytes();
  if (path_ == HostPath::direct) {
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
    return false;
  }
  if (path_ == HostPath::scattered) {
    run_scattered(deadline);
    return false;
  }
  if (path_ == HostPath::across_hosts_sliced) return run_sliced(deadline);
  if (local_size > 1) {
    std::memcpy(slot(local_index_), buffer_.data, buffer_.bytes());
    segment_->wait_all(++generation_, "inputs written", deadline);
    // This rank's 1/L slice: the sum over slots in local-rank order.
    const Range slice = split_even(buffer_.count, local_size, local_index_);
    sum_slots(static_cast<std::size_t>(slice.begin) * element, static_cast<std::size_t>(slice.size()));
    segment_->wait_all(++generation_, "host sum", deadline);
  }
  const bool fell_back = leaders_ring_ && run_between_hosts(*leaders_ring_, leaders_fallback_);
  if (local_size > 1) {
    if (leaders_ring_ || comm_->host_leaders().size() > 1) segment_->wait_all(++generation_, "leaders' exchange", deadline);
    std::memcpy(buffer_.data, result_, buffer_.bytes());
  }
  if (spec_.op == ReduceOp::kAverage && !prescaled_) {
    detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
  }
  return fell_back;
}

}  // namespace aiacc::ring
