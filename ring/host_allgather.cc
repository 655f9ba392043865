#include "ring/host_allgather.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring {
namespace {

constexpr std::size_t kHeader = 8;  // a slot starts with its message's size in bytes
constexpr std::size_t kLine = 64;
// A sanity bound on the sizes peers write (the slots of every rank, twice, must fit in memory).
constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 32;

std::size_t slot_bytes(std::size_t capacity) { return (kHeader + capacity + kLine - 1) / kLine * kLine; }

}  // namespace

bool HostAllgather::applies(const Communicator& comm) { return comm.host_leaders().size() == 1; }

HostAllgather::HostAllgather(std::shared_ptr<Communicator> comm, std::size_t capacity_bytes)
    : comm_(std::move(comm)) {
  if (!applies(*comm_)) {
    throw ConfigError(fmt::format("host all-gather: the {} ranks are on {} hosts (it serves ranks of one host)",
                                  comm_->world_size(), comm_->host_leaders().size()));
  }
  map(std::max<std::size_t>(capacity_bytes, kLine));
}

void HostAllgather::map(std::size_t capacity) {
  if (comm_->world_size() > 1) {
    std::vector<int> ranks(static_cast<std::size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) ranks[static_cast<std::size_t>(r)] = r;
    // Mapped aside first: if it fails, this object keeps its old segment and capacity.
    detail::HostSegment next(*comm_, ranks, 2 * ranks.size() * slot_bytes(capacity), comm_->next_sequence(),
                             "host all-gather");
    segment_.reset();
    segment_.emplace(std::move(next));
  }
  capacity_ = capacity;
  generation_ = 0;  // a fresh segment's arrival counters start at zero
}

std::byte* HostAllgather::slot(std::uint64_t generation, int rank) const {
  const auto set = static_cast<std::size_t>(generation & 1);
  const auto ranks = static_cast<std::size_t>(comm_->world_size());
  return segment_->data() + slot_bytes(capacity_) * (set * ranks + static_cast<std::size_t>(rank));
}

std::vector<std::span<const std::byte>> HostAllgather::run(std::span<const std::byte> mine) {
  const int world = comm_->world_size();
  if (world == 1) return {mine};
  const auto deadline = comm_->deadline();
  for (;;) {
    // A set is written again two exchanges later, when every rank has passed the barrier in
    // between, so has finished with the views of this one.
    const std::uint64_t generation = ++generation_;
    std::byte* own = slot(generation, comm_->rank());
    const std::uint64_t size = mine.size();
    std::memcpy(own, &size, kHeader);
    if (mine.size() <= capacity_ && !mine.empty()) std::memcpy(own + kHeader, mine.data(), mine.size());
    segment_->wait_all(generation, "messages written", deadline);
    std::vector<std::span<const std::byte>> out(static_cast<std::size_t>(world));
    std::uint64_t largest = 0;
    for (int r = 0; r < world; ++r) {
      const std::byte* at = slot(generation, r);
      std::uint64_t bytes = 0;
      std::memcpy(&bytes, at, kHeader);
      if (bytes > kMaxMessageBytes) {
        throw CommError(fmt::format("host all-gather: rank {} wrote a message of {} bytes (at most {} are "
                                    "supported)", r, bytes, kMaxMessageBytes));
      }
      largest = std::max(largest, bytes);
      out[static_cast<std::size_t>(r)] = {at + kHeader, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, capacity_))};
    }
    if (largest <= capacity_) return out;
    // Every rank read the same sizes, so every rank grows alike. Nobody reads this segment
    // after the barrier below.
    segment_->wait_all(++generation_, "sizes read", deadline);
    std::size_t grown = capacity_;
    while (grown < largest) grown *= 2;
    map(grown);
  }
}

}  // namespace aiacc::ring
