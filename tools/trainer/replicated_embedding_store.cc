#include "tools/trainer/replicated_embedding_store.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"

namespace aiacc::trainer {
namespace {

// How many rows ahead the merge asks for a slot: enough misses in flight to cover one.
constexpr std::size_t kMergePrefetchDistance = 16;

// One table's part of a message, padded to 8 bytes so the next part's 64-bit fields stay aligned.
std::size_t part_bytes(std::size_t rows, std::size_t dim) { return (16 + rows * 8 + rows * dim * 4 + 7) / 8 * 8; }

}  // namespace

ReplicatedEmbeddingStore::ReplicatedEmbeddingStore(const EmbeddingTableSpec& spec,
                                                   const optim::OptimizerOptions& optimizer,
                                                   ProcessGroup& group,
                                                   const LocalEmbeddingStoreOptions& replica_options)
    : replica_(spec, optimizer, replica_options), group_(group) {}

void ReplicatedEmbeddingStore::push(std::span<const std::int64_t> ids, const float* grads, double lr) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  grads_.insert(grads_.end(), grads, grads + ids.size() * dim);
  lr_ = lr;
}

void ReplicatedEmbeddingStore::take_pending(std::vector<std::byte>& message) {
  const std::size_t at = message.size();
  const auto count = static_cast<std::int64_t>(ids_.size());
  message.resize(at + part_bytes(ids_.size(), static_cast<std::size_t>(spec().dim)));
  std::byte* p = message.data() + at;
  std::memcpy(p, &count, 8);
  std::memcpy(p + 8, &lr_, 8);
  std::memcpy(p + 16, ids_.data(), ids_.size() * 8);
  std::memcpy(p + 16 + ids_.size() * 8, grads_.data(), grads_.size() * 4);
  ids_.clear();
  grads_.clear();
}

void ReplicatedEmbeddingStore::apply(const std::vector<std::span<const std::byte>>& messages,
                                     std::vector<std::size_t>& offsets) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  // Row counts come from other workers: each is checked against the bytes its message holds
  // before anything is sized from it, and every worker must have pushed at the same rate.
  std::size_t total = 0;
  double lr = 0;
  bool any = false;
  part_rows_.assign(messages.size(), 0);
  for (std::size_t w = 0; w < messages.size(); ++w) {
    if (messages[w].size() < offsets[w] + 16) {
      throw CommError(fmt::format("replicated table '{}': short message from worker {}", spec().name, w));
    }
    std::int64_t n = 0;
    std::memcpy(&n, messages[w].data() + offsets[w], 8);
    const std::size_t room = (messages[w].size() - offsets[w] - 16) / (8 + 4 * dim);
    if (n < 0 || static_cast<std::uint64_t>(n) > room) {
      throw CommError(fmt::format("replicated table '{}': worker {} sent {} rows in a message with room "
                                  "for {}", spec().name, w, n, room));
    }
    part_rows_[w] = static_cast<std::size_t>(n);
    total += static_cast<std::size_t>(n);
    double worker_lr = 0;
    std::memcpy(&worker_lr, messages[w].data() + offsets[w] + 8, 8);
    if (n > 0 && any && worker_lr != lr) {
      throw InternalError(fmt::format("replicated table '{}': workers pushed at different learning "
                                      "rates ({} vs {})", spec().name, lr, worker_lr));
    }
    if (n > 0) {
      lr = worker_lr;
      any = true;
    }
  }
  if (!any) {
    for (std::size_t w = 0; w < messages.size(); ++w) offsets[w] += part_bytes(0, dim);
    return;
  }
  // Open addressing over a power-of-two table at most half full: id -> merged index (+1; 0 is
  // empty). Several times faster than std::unordered_map for the few thousand ids of a step.
  // The scratch is kept between steps; only the slots this step used are cleared afterwards.
  std::size_t capacity = std::max<std::size_t>(merge_slots_.size(), 16);
  while (capacity < 2 * total) capacity *= 2;
  if (capacity != merge_slots_.size()) merge_slots_.assign(capacity, MergeSlot{});
  // Sized up front: nothing below allocates, so nothing leaves the slots half cleared.
  merged_ids_.resize(total);
  merged_.resize(total * dim);
  used_slots_.resize(total);
  std::size_t merged_rows = 0;
  // Fibonacci hashing: the top bits of the product, which every bit of the id reaches.
  const int shift = 64 - std::countr_zero(capacity);
  auto home = [&](std::int64_t id) {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift);
  };
  for (std::size_t w = 0; w < messages.size(); ++w) {
    const auto& message = messages[w];
    std::size_t& offset = offsets[w];
    const std::size_t n = part_rows_[w];  // as checked above (not read again from the sender's memory)
    const auto* ids = reinterpret_cast<const std::int64_t*>(message.data() + offset + 16);
    const auto* grads = reinterpret_cast<const float*>(message.data() + offset + 16 + n * 8);
    offset += part_bytes(n, dim);
    // The merge slots are cold after the step's compute and probed in random order: each
    // probe waited for its miss alone until the slots of the ids a few positions ahead were
    // asked for first.
    for (std::size_t i = 0; i < std::min(n, kMergePrefetchDistance); ++i) __builtin_prefetch(&merge_slots_[home(ids[i])]);
    for (std::size_t i = 0; i < n; ++i) {
      if (i + kMergePrefetchDistance < n) __builtin_prefetch(&merge_slots_[home(ids[i + kMergePrefetchDistance])]);
      const std::int64_t id = ids[i];
      const float* g = grads + i * dim;
      std::size_t h = home(id);
      while (merge_slots_[h].index != 0 && merge_slots_[h].id != id) h = (h + 1) & (capacity - 1);
      MergeSlot& slot = merge_slots_[h];
      if (slot.index == 0) {
        // A new id: its row is this worker's gradient (scaled once it is complete, below).
        slot.id = id;
        slot.index = static_cast<std::uint32_t>(merged_rows + 1);
        merged_ids_[merged_rows] = id;
        used_slots_[merged_rows] = static_cast<std::uint32_t>(h);
        float* row = merged_.data() + merged_rows * dim;
        for (std::size_t j = 0; j < dim; ++j) row[j] = g[j];
        ++merged_rows;
      } else {
        float* row = merged_.data() + (slot.index - 1) * dim;
        for (std::size_t j = 0; j < dim; ++j) row[j] += g[j];
      }
    }
  }
  merged_ids_.resize(merged_rows);
  for (std::size_t r = 0; r < merged_rows; ++r) merge_slots_[used_slots_[r]].index = 0;
  const float scale = 1.0f / static_cast<float>(messages.size());
  const std::size_t merged_floats = merged_ids_.size() * dim;
  for (std::size_t j = 0; j < merged_floats; ++j) merged_[j] *= scale;
  trace::Span span("compute", trace::enabled() ? "sparse optimizer " + spec().name : std::string(),
                   {{"rows", merged_ids_.size()}});
  replica_.push(merged_ids_, merged_.data(), lr);
}

double ReplicatedEmbeddingStore::synchronize(const std::vector<ReplicatedEmbeddingStore*>& tables,
                                             ProcessGroup& group) {
  if (tables.empty()) return 0.0;
  std::vector<std::byte> message;
  for (auto* table : tables) table->take_pending(message);
  std::vector<std::span<const std::byte>> messages;  // read in place: valid until the next allgather
  const auto gather_start = std::chrono::steady_clock::now();
  {
    trace::Span span("allgather", "replicated rows", {{"bytes", message.size()}});
    messages = group.allgather(message);
  }
  const double gather_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - gather_start).count();
  trace::Span span("compute", "apply replicated rows");
  std::vector<std::size_t> offsets(messages.size(), 0);
  for (auto* table : tables) table->apply(messages, offsets);
  return gather_seconds;
}

}  // namespace aiacc::trainer
