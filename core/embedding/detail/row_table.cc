// RowTable: linear probing over fastrange home slots, growth by 1.5x, block arena.
#include "core/embedding/detail/row_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <new>

#include "core/check.h"
#include "core/error.h"

namespace aiacc::embedding::detail {
namespace {

constexpr std::size_t kMinSlots = 16;
// The first block holds 64 rows.
constexpr int kFirstBlockShift = 6;
// fastrange maps the low 32 hash bits onto the capacity, so one table cannot exceed 2^32 slots
// (4 billion; far beyond one partition of any real table).
constexpr std::size_t kMaxSlots = std::size_t{1} << 32;

}  // namespace

RowTable::RowTable(std::int64_t row_floats, std::int64_t rows_per_block, double max_load)
    : row_floats_(row_floats),
      block_shift_(std::countr_zero(static_cast<std::uint64_t>(rows_per_block))),
      block_mask_(rows_per_block - 1),
      first_shift_(std::min(block_shift_, kFirstBlockShift)),
      geometric_blocks_(static_cast<std::size_t>(block_shift_ - first_shift_)),
      max_load_(max_load),
      slots_(kMinSlots) {
  AIACC_CHECK(row_floats > 0, "row floats {}", row_floats);
  AIACC_CHECK(rows_per_block > 0 && std::has_single_bit(static_cast<std::uint64_t>(rows_per_block)),
              "rows per block {} must be a power of two", rows_per_block);
  AIACC_CHECK(max_load > 0.0 && max_load < 1.0, "max load {}", max_load);
}

float* RowTable::find(std::int64_t id, std::uint64_t hash) const {
  const std::size_t capacity = slots_.size();
  std::size_t s = home_slot(hash);
  for (;;) {
    const Slot& slot = slots_[s];
    if (slot.row < 0) return nullptr;
    if (slot.id == id) return row_at(slot.row);
    if (++s == capacity) s = 0;
  }
}

float* RowTable::find_or_insert(std::int64_t id, std::uint64_t hash, bool& created) {
  created = false;
  std::size_t s = home_slot(hash);
  for (;;) {
    const Slot& slot = slots_[s];
    if (slot.row < 0) break;
    if (slot.id == id) return row_at(slot.row);
    if (++s == slots_.size()) s = 0;
  }
  // Absent. Grow first if needed (then the probe restarts in the new table), so the load bound
  // holds after every insert and a probe always ends at an empty slot.
  if (static_cast<double>(size_ + 1) > max_load_ * static_cast<double>(slots_.size())) {
    rehash(std::max(slots_.size() + slots_.size() / 2, kMinSlots));
    s = home_slot(hash);
    while (slots_[s].row >= 0) {
      if (++s == slots_.size()) s = 0;
    }
  }
  const std::int64_t row = allocate_row();  // may throw; nothing changed yet
  slots_[s] = Slot{id, row};
  ++size_;
  created = true;
  return row_at(row);
}

std::int64_t RowTable::allocate_row() {
  const std::int64_t row = size_;
  if (block_of(row) >= blocks_.size()) {
    const std::size_t bytes = static_cast<std::size_t>(block_rows(blocks_.size())) *
                              static_cast<std::size_t>(row_floats_) * sizeof(float);
    // Uninitialised on purpose: every row is written when it is created, and untouched pages of
    // a fresh block cost no resident memory.
    Block block(static_cast<float*>(memory::allocate_large(bytes)), memory::LargeFree{bytes});
    if (!block) {
      throw Error(fmt::format("embedding store: out of memory allocating a block of {} bytes "
                              "({} rows held in this partition)",
                              bytes, size_));
    }
    blocks_.push_back(std::move(block));  // owned first: a throwing push_back frees it
  }
  return row;
}

void RowTable::rehash(std::size_t new_capacity) {
  if (new_capacity > kMaxSlots) {
    throw Error(fmt::format("embedding store: a partition would need {} slots (limit {}); use "
                            "more partitions",
                            new_capacity, kMaxSlots));
  }
  decltype(slots_) fresh(new_capacity);  // may throw bad_alloc; the table is unchanged then
  slots_.swap(fresh);
  for (const Slot& old : fresh) {
    if (old.row < 0) continue;
    std::size_t s = home_slot(row_hash(old.id));
    while (slots_[s].row >= 0) {
      if (++s == new_capacity) s = 0;
    }
    slots_[s] = old;
  }
}

void RowTable::reserve(std::int64_t rows) {
  if (rows <= size_) return;
  const auto needed = static_cast<std::size_t>(
      std::ceil(static_cast<double>(rows) / max_load_)) + 1;
  if (needed > slots_.size()) rehash(std::max(needed, kMinSlots));
  blocks_.reserve(block_of(rows) + 1);
}

std::size_t RowTable::memory_bytes() const {
  std::size_t bytes = slots_.capacity() * sizeof(Slot) + blocks_.capacity() * sizeof(blocks_[0]);
  const std::size_t row_bytes = static_cast<std::size_t>(row_floats_) * sizeof(float);
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    std::size_t block_bytes = static_cast<std::size_t>(block_rows(b)) * row_bytes;
    if (b + 1 == blocks_.size()) {
      // Rows fill the last block from its start and its untouched pages are not resident (a
      // huge page is, whole, once touched): count it up to the page its last row is on.
      const std::size_t page = block_bytes >= memory::kHugePageBytes ? memory::kHugePageBytes : 4096;
      const std::size_t used = static_cast<std::size_t>(size_ - block_start(b)) * row_bytes;
      block_bytes = std::min(block_bytes, (used + page - 1) / page * page);
    }
    bytes += block_bytes;
  }
  return bytes;
}

}  // namespace aiacc::embedding::detail
