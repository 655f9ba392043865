#include "tools/trainer/replicated_embedding_store.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/trace.h"
#include "core/util/random.h"

namespace aiacc::trainer {
namespace {

// How many rows ahead a probe asks for its slot: enough misses in flight to cover one.
constexpr std::size_t kPrefetchDistance = 16;
constexpr std::size_t kHeaderBytes = 40;  // known, new, lr, the sender's numbered rows and their hash

std::size_t round8(std::size_t bytes) { return (bytes + 7) / 8 * 8; }

// One table's part of a message, padded to 8 bytes so the next part's 64-bit fields stay aligned.
std::size_t part_bytes(std::size_t known, std::size_t fresh, std::size_t dim) {
  return round8(kHeaderBytes + round8(known * 4) + fresh * 8 + (known + fresh) * dim * 4);
}

// Fibonacci hashing of an id into a power-of-two table of 2^(64 - shift) slots: the top bits of
// the product, which every bit of the id reaches.
std::size_t home_slot(std::int64_t id, int shift) {
  return static_cast<std::size_t>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift);
}

int shift_for(std::size_t capacity) { return 64 - std::countr_zero(capacity); }

// The slot holding `id` in `slots`, or the empty one where it would go.
template <class Slot>
std::size_t find_slot(const std::vector<Slot>& slots, std::int64_t id, int shift) {
  const std::size_t mask = slots.size() - 1;
  std::size_t h = home_slot(id, shift);
  while (slots[h].index != 0 && slots[h].id != id) h = (h + 1) & mask;
  return h;
}

// Row copies and sums of a few floats each (dim 1 for a wide model's weights): plain loops,
// where memcpy's call per row cost more than the copy.
void copy_row(float* to, const float* from, std::size_t dim) {
  for (std::size_t j = 0; j < dim; ++j) to[j] = from[j];
}

void add_row(float* to, const float* from, std::size_t dim) {
  for (std::size_t j = 0; j < dim; ++j) to[j] += from[j];
}

}  // namespace

ReplicatedEmbeddingStore::ReplicatedEmbeddingStore(const EmbeddingTableSpec& spec,
                                                   const optim::OptimizerOptions& optimizer,
                                                   ProcessGroup& group,
                                                   const LocalEmbeddingStoreOptions& replica_options,
                                                   std::size_t max_numbered_rows)
    : replica_(spec, optimizer, replica_options),
      group_(group),
      max_numbered_rows_(std::min<std::size_t>(max_numbered_rows, UINT32_MAX - 1)) {}

void ReplicatedEmbeddingStore::pull(std::span<const std::int64_t> ids, float* rows) {
  const std::size_t n = ids.size();
  pulled_ids_.assign(ids.begin(), ids.end());
  pulled_indices_.assign(n, kNotNumbered);
  pulled_generation_ = numbering_generation_;
  // Nothing numbered yet (the first step, or just after a load): every row from the replica.
  if (n == 0 || index_slots_.empty()) return replica_.pull(ids, rows);
  AIACC_CHECK(rows != nullptr, "replicated table {}: pull into a null buffer", spec().name);
  const auto dim = static_cast<std::size_t>(spec().dim);
  pulled_rows_.assign(n, nullptr);
  unnumbered_ids_.clear();
  unnumbered_positions_.clear();
  const int shift = shift_for(index_slots_.size());
  for (std::size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) __builtin_prefetch(&index_slots_[home_slot(ids[i], shift)]);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) __builtin_prefetch(&index_slots_[home_slot(ids[i + kPrefetchDistance], shift)]);
    const IdSlot& slot = index_slots_[find_slot(index_slots_, ids[i], shift)];
    if (slot.index != 0) {
      pulled_indices_[i] = slot.index - 1;
      pulled_rows_[i] = row_of_index_[slot.index - 1];
    } else {
      unnumbered_ids_.push_back(ids[i]);
      unnumbered_positions_.push_back(static_cast<std::uint32_t>(i));
    }
  }
  // The numbered rows, each asked for a few ahead (scattered over the replica's arena).
  for (std::size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) {
    if (pulled_rows_[i] != nullptr) __builtin_prefetch(pulled_rows_[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n && pulled_rows_[i + kPrefetchDistance] != nullptr) {
      __builtin_prefetch(pulled_rows_[i + kPrefetchDistance]);
    }
    if (pulled_rows_[i] != nullptr) copy_row(rows + i * dim, pulled_rows_[i], dim);
  }
  if (unnumbered_ids_.empty()) return;
  // The replica creates rows it does not hold yet (or, read-only, returns their initial values).
  unnumbered_rows_.resize(unnumbered_ids_.size() * dim);
  replica_.pull(unnumbered_ids_, unnumbered_rows_.data());
  for (std::size_t k = 0; k < unnumbered_positions_.size(); ++k) {
    copy_row(rows + unnumbered_positions_[k] * dim, unnumbered_rows_.data() + k * dim, dim);
  }
}

void ReplicatedEmbeddingStore::push(std::span<const std::int64_t> ids, const float* grads, double lr) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  if (ids_.empty()) pushed_generation_ = numbering_generation_;
  // The pull's indices serve when these are the ids it pulled, under the numbering it saw. (Where
  // the numbering changed since the step's first push, classify_pending() looks every row up.)
  const bool as_pulled = pulled_generation_ == numbering_generation_ && std::ranges::equal(ids, pulled_ids_);
  if (as_pulled) {
    pushed_indices_.insert(pushed_indices_.end(), pulled_indices_.begin(), pulled_indices_.end());
  } else {
    pushed_indices_.insert(pushed_indices_.end(), ids.size(), kLookUp);
  }
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  grads_.insert(grads_.end(), grads, grads + ids.size() * dim);
  lr_ = lr;
}

void ReplicatedEmbeddingStore::load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) {
  replica_.load_rows(rows);
  clear_indices();  // the rows' addresses changed
}

void ReplicatedEmbeddingStore::add_index(std::int64_t id, float* row) {
  if (2 * (row_of_index_.size() + 1) > index_slots_.size()) {
    // Rehash into twice the slots (at most half full after this add).
    std::vector<IdSlot> grown(std::max<std::size_t>(64, 2 * index_slots_.size()));
    const int shift = shift_for(grown.size());
    for (const IdSlot& slot : index_slots_) {
      if (slot.index != 0) grown[find_slot(grown, slot.id, shift)] = slot;
    }
    index_slots_ = std::move(grown);
  }
  if (row_of_index_.size() >= UINT32_MAX - 1) {
    throw InternalError(fmt::format("replicated table '{}': more than 2^32 rows to number", spec().name));
  }
  IdSlot& slot = index_slots_[find_slot(index_slots_, id, shift_for(index_slots_.size()))];
  slot.id = id;
  slot.index = static_cast<std::uint32_t>(row_of_index_.size() + 1);
  row_of_index_.push_back(row);
  merge_of_index_.push_back(0);
  numbering_hash_ = mix64(numbering_hash_ ^ mix64(static_cast<std::uint64_t>(id)));
  ++numbering_generation_;
}

void ReplicatedEmbeddingStore::clear_indices() {
  index_slots_.clear();
  row_of_index_.clear();
  merge_of_index_.clear();
  numbering_hash_ = 0;
  ++numbering_generation_;
}

std::size_t ReplicatedEmbeddingStore::classify_pending() {
  const std::size_t n = ids_.size();
  known_positions_.clear();
  new_positions_.clear();
  known_indices_.clear();
  // Indices the pulls found are good while the numbering has not changed since; the rest, or all
  // where it has (the rows were replaced since), are looked up.
  if (pushed_generation_ != numbering_generation_) std::fill(pushed_indices_.begin(), pushed_indices_.end(), kLookUp);
  const int shift = index_slots_.empty() ? 0 : shift_for(index_slots_.size());
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t index = pushed_indices_[i];
    if (index == kLookUp) {
      index = kNotNumbered;
      if (!index_slots_.empty()) {
        const IdSlot& slot = index_slots_[find_slot(index_slots_, ids_[i], shift)];
        if (slot.index != 0) index = slot.index - 1;
      }
    }
    if (index != kNotNumbered) {
      known_positions_.push_back(static_cast<std::uint32_t>(i));
      known_indices_.push_back(index);
    } else {
      new_positions_.push_back(static_cast<std::uint32_t>(i));
    }
  }
  return part_bytes(known_positions_.size(), new_positions_.size(), static_cast<std::size_t>(spec().dim));
}

void ReplicatedEmbeddingStore::write_pending(std::byte* p) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  const std::size_t known = known_positions_.size(), fresh = new_positions_.size();
  const std::uint64_t header[5] = {known, fresh, std::bit_cast<std::uint64_t>(lr_), row_of_index_.size(),
                                   numbering_hash_};
  std::memcpy(p, header, kHeaderBytes);
  p += kHeaderBytes;
  std::memcpy(p, known_indices_.data(), known * 4);
  p += round8(known * 4);
  auto* new_ids = reinterpret_cast<std::int64_t*>(p);
  for (std::size_t k = 0; k < fresh; ++k) new_ids[k] = ids_[new_positions_[k]];
  auto* grads = reinterpret_cast<float*>(p + fresh * 8);
  for (const auto& positions : {&known_positions_, &new_positions_}) {
    for (std::uint32_t i : *positions) {
      copy_row(grads, grads_.data() + i * dim, dim);
      grads += dim;
    }
  }
  ids_.clear();
  grads_.clear();
  pushed_indices_.clear();
}

void ReplicatedEmbeddingStore::apply(const std::vector<std::span<const std::byte>>& messages,
                                     std::vector<std::size_t>& offsets) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  // Row counts come from other workers: each is checked against the bytes its message holds
  // before anything is sized from it, every worker must have pushed at the same rate, and all
  // must number the table's rows alike.
  std::size_t total = 0, total_new = 0;
  double lr = 0;
  bool any = false;
  part_rows_.assign(messages.size(), {});
  known_indices_.clear();
  for (std::size_t w = 0; w < messages.size(); ++w) {
    if (messages[w].size() < offsets[w] + kHeaderBytes) {
      throw CommError(fmt::format("replicated table '{}': short message from worker {}", spec().name, w));
    }
    std::uint64_t header[5];
    std::memcpy(header, messages[w].data() + offsets[w], kHeaderBytes);
    const std::size_t left = messages[w].size() - offsets[w];
    // Bounded before part_bytes() multiplies them: a row takes at least 4 x dim bytes, so no
    // count that fits can overflow it.
    if (header[0] > (left - kHeaderBytes) / 4 / dim || header[1] > (left - kHeaderBytes) / 4 / dim ||
        header[0] + header[1] > (left - kHeaderBytes) / 4 / dim || part_bytes(header[0], header[1], dim) > left) {
      throw CommError(fmt::format("replicated table '{}': worker {} sent {} numbered and {} new rows in a "
                                  "message of {} bytes", spec().name, w, header[0], header[1], left));
    }
    if (header[3] != row_of_index_.size() || header[4] != numbering_hash_) {
      throw InternalError(fmt::format("replicated table '{}': worker {} numbers {} rows (hash {:016x}), this worker "
                                      "{} (hash {:016x}): the replicas have diverged", spec().name, w, header[3],
                                      header[4], row_of_index_.size(), numbering_hash_));
    }
    // Copied out once and checked here: read again from the sender's (shared) memory while
    // merging, an index could change under the check, and a throw there would leave merge
    // slots set.
    const std::size_t first = known_indices_.size();
    known_indices_.resize(first + header[0]);
    std::memcpy(known_indices_.data() + first, messages[w].data() + offsets[w] + kHeaderBytes, header[0] * 4);
    for (std::size_t i = first; i < known_indices_.size(); ++i) {
      if (known_indices_[i] >= row_of_index_.size()) {
        throw CommError(fmt::format("replicated table '{}': worker {} sent row number {} of {}", spec().name, w,
                                    known_indices_[i], row_of_index_.size()));
      }
    }
    part_rows_[w] = {header[0], header[1]};
    total += header[0] + header[1];
    total_new += header[1];
    const double worker_lr = std::bit_cast<double>(header[2]);
    const bool pushed = header[0] + header[1] > 0;
    if (pushed && any && worker_lr != lr) {
      throw InternalError(fmt::format("replicated table '{}': workers pushed at different learning "
                                      "rates ({} vs {})", spec().name, lr, worker_lr));
    }
    if (pushed) {
      lr = worker_lr;
      any = true;
    }
  }
  if (!any) {
    for (std::size_t w = 0; w < messages.size(); ++w) offsets[w] += part_bytes(0, 0, dim);
    return;
  }
  // Sized up front: nothing allocates until the merge slots are cleared again.
  std::size_t capacity = std::max<std::size_t>(new_slots_.size(), 16);
  while (capacity < 2 * total_new) capacity *= 2;
  if (capacity != new_slots_.size()) new_slots_.assign(capacity, IdSlot{});
  const int new_shift = shift_for(capacity);
  merged_known_.resize(total - total_new);
  merged_known_grads_.resize((total - total_new) * dim);
  merged_new_.resize(total_new);
  merged_new_grads_.resize(total_new * dim);
  used_new_slots_.resize(total_new);
  merged_known_rows_.resize(total - total_new);
  std::size_t known_rows = 0, new_rows = 0;
  const std::uint32_t* indices = known_indices_.data();  // every worker's, in worker order, as checked above
  for (std::size_t w = 0; w < messages.size(); ++w) {
    const std::byte* part = messages[w].data() + offsets[w];
    const auto [known, fresh] = part_rows_[w];  // as checked above (not read again from the sender's memory)
    offsets[w] += part_bytes(known, fresh, dim);
    const auto* ids = reinterpret_cast<const std::int64_t*>(part + kHeaderBytes + round8(known * 4));
    const auto* grads = reinterpret_cast<const float*>(part + kHeaderBytes + round8(known * 4) + fresh * 8);
    for (std::size_t i = 0; i < known; ++i) {
      const std::uint32_t index = indices[i];
      std::uint32_t& merged = merge_of_index_[index];
      if (merged == 0) {
        merged_known_[known_rows] = index;
        copy_row(merged_known_grads_.data() + known_rows * dim, grads + i * dim, dim);
        merged = static_cast<std::uint32_t>(++known_rows);
      } else {
        add_row(merged_known_grads_.data() + (merged - 1) * dim, grads + i * dim, dim);
      }
    }
    indices += known;
    grads += known * dim;
    // New rows by id, through the id table (cold after the step's compute: prefetched ahead).
    for (std::size_t i = 0; i < std::min(fresh, kPrefetchDistance); ++i) __builtin_prefetch(&new_slots_[home_slot(ids[i], new_shift)]);
    for (std::size_t i = 0; i < fresh; ++i) {
      if (i + kPrefetchDistance < fresh) __builtin_prefetch(&new_slots_[home_slot(ids[i + kPrefetchDistance], new_shift)]);
      const std::size_t h = find_slot(new_slots_, ids[i], new_shift);
      IdSlot& slot = new_slots_[h];
      if (slot.index == 0) {
        slot.id = ids[i];
        merged_new_[new_rows] = ids[i];
        used_new_slots_[new_rows] = static_cast<std::uint32_t>(h);
        copy_row(merged_new_grads_.data() + new_rows * dim, grads + i * dim, dim);
        slot.index = static_cast<std::uint32_t>(++new_rows);
      } else {
        add_row(merged_new_grads_.data() + (slot.index - 1) * dim, grads + i * dim, dim);
      }
    }
  }
  // The merge slots are cleared before anything else can throw.
  for (std::size_t r = 0; r < new_rows; ++r) new_slots_[used_new_slots_[r]].index = 0;
  for (std::size_t r = 0; r < known_rows; ++r) {
    merged_known_rows_[r] = row_of_index_[merged_known_[r]];
    merge_of_index_[merged_known_[r]] = 0;
  }
  merged_known_.resize(known_rows);
  merged_known_rows_.resize(known_rows);
  merged_new_.resize(new_rows);
  const float scale = 1.0f / static_cast<float>(messages.size());
  for (std::size_t j = 0; j < known_rows * dim; ++j) merged_known_grads_[j] *= scale;
  for (std::size_t j = 0; j < new_rows * dim; ++j) merged_new_grads_[j] *= scale;
  trace::Span span("compute", trace::enabled() ? "sparse optimizer " + spec().name : std::string(),
                   {{"rows", known_rows + new_rows}, {"new rows", new_rows}});
  replica_.push_rows(merged_known_rows_, merged_known_grads_.data(), lr);
  if (new_rows > 0) {
    // Numbered in merge order: the same on every replica, as all merge the same messages.
    merged_new_rows_.resize(new_rows);
    replica_.rows_of(merged_new_, merged_new_rows_.data());
    for (std::size_t r = 0; r < new_rows && row_of_index_.size() < max_numbered_rows_; ++r) {
      add_index(merged_new_[r], merged_new_rows_[r]);
    }
    replica_.push_rows(merged_new_rows_, merged_new_grads_.data(), lr);
  }
}

double ReplicatedEmbeddingStore::synchronize(const std::vector<ReplicatedEmbeddingStore*>& tables,
                                             ProcessGroup& group) {
  if (tables.empty()) return 0.0;
  // Kept between steps: grown when a step needs more, never zero-filled again (a fresh vector
  // grown table by table moved and cleared its bytes each step).
  thread_local std::vector<std::byte> message;
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (auto* table : tables) total += sizes.emplace_back(table->classify_pending());
  if (message.size() < total) message.resize(total);
  for (std::size_t t = 0, at = 0; t < tables.size(); at += sizes[t], ++t) tables[t]->write_pending(message.data() + at);
  std::vector<std::span<const std::byte>> messages;  // read in place: valid until the next allgather
  const auto gather_start = std::chrono::steady_clock::now();
  {
    trace::Span span("allgather", "replicated rows", {{"bytes", total}});
    messages = group.allgather(std::span<const std::byte>(message.data(), total));
  }
  const double gather_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - gather_start).count();
  trace::Span span("compute", "apply replicated rows");
  std::vector<std::size_t> offsets(messages.size(), 0);
  for (auto* table : tables) table->apply(messages, offsets);
  return gather_seconds;
}

}  // namespace aiacc::trainer
