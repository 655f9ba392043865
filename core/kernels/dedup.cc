// IdDeduplicator: open addressing with linear probing over a power-of-two table at most half
// full, keyed by a splitmix64 hash of the id (hashed CTR ids are already well spread, but
// small consecutive ids are not, and the mix makes both cheap to probe).
#include "core/kernels/dedup.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/check.h"
#include "core/util/random.h"

namespace aiacc::kernels {

void IdDeduplicator::run(std::span<const std::int64_t> ids, DedupResult& out) {
  AIACC_CHECK_LT(ids.size(), static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
                 "too many ids in one batch to de-duplicate");
  out.unique_ids.clear();
  out.inverse.resize(ids.size());
  if (ids.empty()) return;
  // Load factor <= 1/2 keeps linear-probe chains short. Only the first `capacity` slots are
  // used, so a large table left by an earlier batch costs nothing extra.
  const std::size_t capacity = std::bit_ceil(std::max<std::size_t>(16, 2 * ids.size()));
  if (slots_.size() < capacity) slots_.resize(capacity);
  if (++stamp_ == 0) {
    // Wrapped after 2^32 runs: stale stamps could match again.
    std::fill(slots_.begin(), slots_.end(), Slot{});
    stamp_ = 1;
  }
  const std::uint32_t stamp = stamp_;
  const std::size_t mask = capacity - 1;
  auto home = [&](std::int64_t id) { return static_cast<std::size_t>(mix64(static_cast<std::uint64_t>(id))) & mask; };
  const std::size_t n = ids.size();
  // Written through local pointers: push_back's size field, reloaded after every store the
  // compiler cannot prove apart from it, was the loop's hottest load.
  out.unique_ids.resize(n);
  std::int64_t* unique = out.unique_ids.data();
  std::int64_t* inverse = out.inverse.data();
  std::int32_t count = 0;
  Slot* slots = slots_.data();
  auto place = [&](std::size_t p) {
    const std::int64_t id = ids[p];
    std::size_t slot = home(id);
    for (;;) {
      Slot& s = slots[slot];
      if (s.stamp != stamp) {
        s = Slot{id, count, stamp};
        unique[count] = id;
        inverse[p] = count++;
        return;
      }
      if (s.id == id) {
        inverse[p] = s.index;
        return;
      }
      slot = (slot + 1) & mask;
    }
  };
  // A large request's table does not fit in the caches, and every first probe missed: there
  // the slot of the id kPrefetchDistance positions ahead is asked for while this one is placed
  // (100k ids: 1.10 -> 0.92 ms). A small table stays cached, and hashing twice only costs.
  constexpr std::size_t kPrefetchDistance = 16;
  constexpr std::size_t kCachedTableBytes = std::size_t{256} << 10;
  if (capacity * sizeof(Slot) <= kCachedTableBytes) {
    for (std::size_t p = 0; p < n; ++p) place(p);
  } else {
    for (std::size_t p = 0; p < std::min(n, kPrefetchDistance); ++p) __builtin_prefetch(&slots[home(ids[p])], 1);
    for (std::size_t p = 0; p < n; ++p) {
      if (p + kPrefetchDistance < n) __builtin_prefetch(&slots[home(ids[p + kPrefetchDistance])], 1);
      place(p);
    }
  }
  out.unique_ids.resize(static_cast<std::size_t>(count));
}

DedupResult deduplicate_ids(std::span<const std::int64_t> ids) {
  IdDeduplicator dedup;
  DedupResult result;
  dedup.run(ids, result);
  return result;
}

}  // namespace aiacc::kernels
