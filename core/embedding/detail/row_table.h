// Internal to core/embedding: one partition's storage for LocalEmbeddingStore. An open-addressing
// hash table (linear probing, 16-byte slots id -> row index) over a block arena whose rows hold
// [value | optimiser state] contiguously. Rows never move once created (the arena grows by whole
// blocks), so growing the table rehashes 16-byte slots only, never row data.
// Blocks start small (64 rows) and double up to rows_per_block (B), then stay at B, so a small
// table (a wide field, a test) costs kilobytes while a big one allocates in large steps.
// Slot arrays and blocks of 2 MiB and more lie on huge pages (core/memory/huge_pages.h): a big
// table's random lookups would otherwise miss the TLB as often as the caches.
// Legend: R = rows held, C = slot capacity, W = floats per row (dim + state floats).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "core/memory/huge_pages.h"
#include "core/util/random.h"

namespace aiacc::embedding::detail {

// The hash every LocalEmbeddingStore uses for an id: the partition comes from its high 32 bits,
// the slot from its low 32 bits. The salt keeps it independent of other id hashes in the system
// (a parameter-server sharding by mix64(id) would otherwise send every id of a shard into a
// few partitions).
inline std::uint64_t row_hash(std::int64_t id) {
  return mix64(static_cast<std::uint64_t>(id) ^ 0x5bd1e9955bd1e995ull);
}

// Partition of a hash among `num_partitions` (multiply-shift: uniform for any count).
inline int partition_of_hash(std::uint64_t hash, int num_partitions) {
  return static_cast<int>(((hash >> 32) * static_cast<std::uint64_t>(num_partitions)) >> 32);
}

// Not thread-safe: the store guards each RowTable with its partition's mutex. Movable.
class RowTable {
 public:
  // row_floats: W. rows_per_block: rows allocated at once (a power of two). max_load: the
  // table grows by 1.5x when an insert would push R / C above it (so the load stays between
  // max_load / 1.5 and max_load).
  RowTable(std::int64_t row_floats, std::int64_t rows_per_block, double max_load);

  // The row of `id` (hash = row_hash(id)), or null when absent.
  float* find(std::int64_t id, std::uint64_t hash) const;
  // The row of `id`, inserting an uninitialised one when absent (then `created` is true).
  // Throws Error when memory runs out (the table is then unchanged).
  float* find_or_insert(std::int64_t id, std::uint64_t hash, bool& created);

  // Hints the cache to load the first slot `hash` probes (the store runs this a few positions
  // ahead: a large table's lookups are otherwise one cache miss after another).
  void prefetch(std::uint64_t hash) const { __builtin_prefetch(&slots_[home_slot(hash)]); }

  // Grows the slot table (and arena) so that `rows` rows fit without another rehash.
  void reserve(std::int64_t rows);

  std::int64_t size() const { return size_; }
  std::int64_t capacity() const { return static_cast<std::int64_t>(slots_.size()); }
  // Bytes held: slots plus arena blocks, the last one up to the page its last row is on (a
  // 2 MiB page for a huge block: an upper bound where huge pages are off).
  std::size_t memory_bytes() const;

  // Calls fn(id, row) for every row, in slot order (callers sort when order matters).
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& slot : slots_) {
      if (slot.row >= 0) fn(slot.id, row_at(slot.row));
    }
  }

 private:
  struct Slot {
    std::int64_t id = 0;
    std::int64_t row = -1;  // index into the arena, -1 when the slot is empty
  };
  static_assert(sizeof(Slot) == 16);

  // Blocks 0..G hold rows [0, B) (sizes 2^f, 2^f, 2^(f+1), ..., B/2 with 2^f = min(64, B));
  // block G + k holds rows [k B, (k + 1) B).
  std::size_t block_of(std::int64_t row) const {
    if (row >= block_mask_ + 1) return geometric_blocks_ + static_cast<std::size_t>(row >> block_shift_);
    return static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(row >> first_shift_)));
  }
  std::int64_t block_start(std::size_t block) const {
    if (block > geometric_blocks_) {
      return static_cast<std::int64_t>(block - geometric_blocks_) << block_shift_;
    }
    return block == 0 ? 0 : std::int64_t{1} << (first_shift_ + static_cast<int>(block) - 1);
  }
  std::int64_t block_rows(std::size_t block) const {
    if (block > geometric_blocks_) return block_mask_ + 1;
    return std::int64_t{1} << (first_shift_ + (block == 0 ? 0 : static_cast<int>(block) - 1));
  }
  float* row_at(std::int64_t row) const {
    const std::size_t block = block_of(row);
    return blocks_[block].get() + (row - block_start(block)) * row_floats_;
  }
  // Slot where the probe for `hash` starts: fastrange on the low 32 bits (any capacity works).
  std::size_t home_slot(std::uint64_t hash) const {
    return static_cast<std::size_t>(((hash & 0xffffffffull) * slots_.size()) >> 32);
  }
  void rehash(std::size_t new_capacity);
  std::int64_t allocate_row();

  std::int64_t row_floats_;
  int block_shift_;           // log2(B)
  std::int64_t block_mask_;   // B - 1
  int first_shift_;           // f: log2 of the first block's rows
  std::size_t geometric_blocks_;  // G = log2(B) - f
  double max_load_;
  std::int64_t size_ = 0;
  // Blocks start on a cache line (allocate_large aligns to 64 bytes or more), so a row of 64 or
  // 128 bytes (dim 8 or 16 with Adagrad) spans one or two lines rather than two or three.
  using Block = std::unique_ptr<float[], memory::LargeFree>;
  std::vector<Slot, memory::HugePageAllocator<Slot>> slots_;
  std::vector<Block> blocks_;
};

}  // namespace aiacc::embedding::detail
