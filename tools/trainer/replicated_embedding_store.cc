#include "tools/trainer/replicated_embedding_store.h"

#include <cstring>

#include "core/error.h"
#include "core/trace.h"

namespace aiacc::trainer {

ReplicatedEmbeddingStore::ReplicatedEmbeddingStore(const EmbeddingTableSpec& spec,
                                                   const optim::OptimizerOptions& optimizer,
                                                   ProcessGroup& group)
    : replica_(spec, optimizer), group_(group) {}

void ReplicatedEmbeddingStore::push(std::span<const std::int64_t> ids, const float* grads, double lr) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  grads_.insert(grads_.end(), grads, grads + ids.size() * dim);
  lr_ = lr;
}

void ReplicatedEmbeddingStore::take_pending(std::vector<std::byte>& message) {
  const std::size_t at = message.size();
  const auto count = static_cast<std::int64_t>(ids_.size());
  message.resize(at + 16 + ids_.size() * 8 + grads_.size() * 4);
  std::byte* p = message.data() + at;
  std::memcpy(p, &count, 8);
  std::memcpy(p + 8, &lr_, 8);
  std::memcpy(p + 16, ids_.data(), ids_.size() * 8);
  std::memcpy(p + 16 + ids_.size() * 8, grads_.data(), grads_.size() * 4);
  ids_.clear();
  grads_.clear();
}

void ReplicatedEmbeddingStore::apply(const std::vector<std::vector<std::byte>>& messages,
                                     std::vector<std::size_t>& offsets) {
  const auto dim = static_cast<std::size_t>(spec().dim);
  // Row counts come from other workers: each is checked against the bytes its message holds
  // before anything is sized from it.
  std::size_t total = 0;
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
    total += static_cast<std::size_t>(n);
  }
  std::vector<std::int64_t> merged_ids;
  std::vector<float> merged;
  merged_ids.reserve(total);
  merged.reserve(total * dim);
  // Open addressing over a power-of-two table at most half full: id -> merged index (+1; 0 is
  // empty). Several times faster than std::unordered_map for the few thousand ids of a step.
  std::size_t capacity = 16;
  while (capacity < 2 * total) capacity *= 2;
  std::vector<std::int64_t> keys(capacity);
  std::vector<std::uint32_t> index(capacity, 0);
  auto find_or_add = [&](std::int64_t id, std::size_t next) -> std::pair<std::size_t, bool> {
    std::size_t h = static_cast<std::size_t>(static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull >> 20) & (capacity - 1);
    for (;; h = (h + 1) & (capacity - 1)) {
      if (index[h] == 0) {
        keys[h] = id;
        index[h] = static_cast<std::uint32_t>(next + 1);
        return {next, true};
      }
      if (keys[h] == id) return {index[h] - 1, false};
    }
  };
  double lr = 0;
  bool any = false;
  for (std::size_t w = 0; w < messages.size(); ++w) {
    const auto& message = messages[w];
    std::size_t& offset = offsets[w];
    std::int64_t n = 0;  // checked against the message size above
    double worker_lr = 0;
    std::memcpy(&n, message.data() + offset, 8);
    std::memcpy(&worker_lr, message.data() + offset + 8, 8);
    const std::size_t bytes = 16 + static_cast<std::size_t>(n) * (8 + 4 * dim);
    const auto* ids = reinterpret_cast<const std::int64_t*>(message.data() + offset + 16);
    const auto* grads = reinterpret_cast<const float*>(message.data() + offset + 16 + static_cast<std::size_t>(n) * 8);
    offset += bytes;
    if (n == 0) continue;
    if (any && worker_lr != lr) {
      throw InternalError(fmt::format("replicated table '{}': workers pushed at different learning "
                                      "rates ({} vs {})", spec().name, lr, worker_lr));
    }
    lr = worker_lr;
    any = true;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto [at, fresh] = find_or_add(ids[i], merged_ids.size());
      const float* g = grads + static_cast<std::size_t>(i) * dim;
      if (fresh) {
        merged_ids.push_back(ids[i]);
        merged.insert(merged.end(), g, g + dim);
      } else {
        float* row = merged.data() + at * dim;
        for (std::size_t j = 0; j < dim; ++j) row[j] += g[j];
      }
    }
  }
  if (!any) return;
  const float scale = 1.0f / static_cast<float>(messages.size());
  for (float& g : merged) g *= scale;
  trace::Span span("compute", "sparse optimizer " + spec().name, {{"rows", merged_ids.size()}});
  replica_.push(merged_ids, merged.data(), lr);
}

void ReplicatedEmbeddingStore::synchronize(const std::vector<ReplicatedEmbeddingStore*>& tables,
                                           ProcessGroup& group) {
  if (tables.empty()) return;
  std::vector<std::byte> message;
  for (auto* table : tables) table->take_pending(message);
  std::vector<std::vector<std::byte>> messages;
  {
    trace::Span span("allgather", "replicated rows", {{"bytes", message.size()}});
    messages = group.allgather(message);
  }
  trace::Span span("compute", "apply replicated rows");
  std::vector<std::size_t> offsets(messages.size(), 0);
  for (auto* table : tables) table->apply(messages, offsets);
}

}  // namespace aiacc::trainer
