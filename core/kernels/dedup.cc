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
  // used (and cleared), so a large table left by an earlier batch costs nothing extra.
  const std::size_t capacity = std::bit_ceil(std::max<std::size_t>(16, 2 * ids.size()));
  if (slots_.size() < capacity) {
    slots_.resize(capacity);
    keys_.resize(capacity);
  }
  std::fill_n(slots_.begin(), capacity, -1);
  const std::size_t mask = capacity - 1;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    const std::int64_t id = ids[p];
    std::size_t slot = static_cast<std::size_t>(mix64(static_cast<std::uint64_t>(id))) & mask;
    for (;;) {
      const std::int32_t index = slots_[slot];
      if (index < 0) {
        const auto fresh = static_cast<std::int32_t>(out.unique_ids.size());
        slots_[slot] = fresh;
        keys_[slot] = id;
        out.unique_ids.push_back(id);
        out.inverse[p] = fresh;
        break;
      }
      if (keys_[slot] == id) {
        out.inverse[p] = index;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
}

DedupResult deduplicate_ids(std::span<const std::int64_t> ids) {
  IdDeduplicator dedup;
  DedupResult result;
  dedup.run(ids, result);
  return result;
}

}  // namespace aiacc::kernels
