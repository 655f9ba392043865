// CachingAllocator: per-stream best-fit pools over segments from a MemorySource.
#include "core/memory/caching_allocator.h"

#include <fmt/format.h>

#include <deque>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace aiacc::memory {
namespace {

std::string format_bytes(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::size_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(1u << 30));
  if (bytes >= (std::size_t{1} << 20)) return fmt::format("{:.2f} MiB", b / double(1u << 20));
  if (bytes >= (std::size_t{1} << 10)) return fmt::format("{:.1f} KiB", b / double(1u << 10));
  return fmt::format("{} B", bytes);
}

// Requests above 2^60 bytes (an exbibyte) are refused before any rounding could overflow.
constexpr std::size_t kLargestRequest = std::size_t{1} << 60;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A piece of a segment. The blocks of a segment are linked in address order and together
// cover it exactly; `prev == next == null` means the block is the whole segment.
struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  StreamId stream = 0;
  bool small = false;      // from the small pool
  bool allocated = false;
  int pending = 0;         // after free(): other streams' uses not yet finished
  std::size_t requested = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamId> other_streams;  // record_stream() while allocated
};

// A block is in its pool exactly when it is neither allocated nor pending.
bool is_cached(const Block* b) { return !b->allocated && b->pending == 0; }

// Pools are ordered by (stream, size, address): lower_bound finds the best fit on a stream.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
  }
};

}  // namespace

class CachingAllocator::Pools {
 public:
  Pools(MemorySource& source, const CachingAllocatorOptions& options)
      : source_(source), options_(options) {}

  void* allocate(std::size_t bytes, StreamId stream) {
    std::lock_guard lock(mutex_);
    collect_finished();
    if (bytes > kLargestRequest) {  // also a negative size cast to size_t: never round it to 0
      throw OutOfMemoryError(fmt::format("{}: cannot allocate {} bytes (more than any device holds)",
                                         source_.describe(), bytes));
    }
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), options_.round_bytes);
    const bool small = size <= options_.small_limit;
    Block* block = take_best_fit(small, size, stream);
    if (block == nullptr) block = new_segment(small, size, stream, bytes);
    try {
      split(block, size);
    } catch (...) {
      cache(block);
      throw;
    }
    block->allocated = true;
    block->requested = bytes;
    ++stats_.allocations;
    stats_.bytes_in_use += block->size;
    stats_.bytes_requested += bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return block->ptr;
  }

  void free(void* ptr) {
    std::lock_guard lock(mutex_);
    Block* block = allocated_block(ptr, "free");
    // Record every event before changing anything, so a failing record leaves the block as it was.
    std::vector<EventId> events;
    try {
      if (options_.free_waits_for_own_stream) events.push_back(source_.record_event(block->stream));
      for (StreamId s : block->other_streams) events.push_back(source_.record_event(s));
    } catch (...) {
      for (EventId e : events) source_.release_event(e);
      throw;
    }
    // Queued before the block changes too: a queue that cannot grow (bad_alloc) would otherwise
    // leave the block pending on events nobody waits for, never to be reused.
    const std::size_t queued = pending_.size();
    try {
      for (EventId e : events) pending_.emplace_back(e, block);
    } catch (...) {
      while (pending_.size() > queued) pending_.pop_back();
      for (EventId e : events) source_.release_event(e);
      throw;
    }
    block->allocated = false;
    block->other_streams.clear();
    stats_.bytes_in_use -= block->size;
    stats_.bytes_requested -= block->requested;
    block->requested = 0;
    if (events.empty()) {
      cache(block);
      return;
    }
    block->pending = static_cast<int>(events.size());
    stats_.bytes_pending += block->size;
  }

  void record_stream(void* ptr, StreamId stream) {
    std::lock_guard lock(mutex_);
    Block* block = allocated_block(ptr, "record_stream");
    if (stream == block->stream) return;  // its own stream orders the work already
    for (StreamId s : block->other_streams) {
      if (s == stream) return;
    }
    block->other_streams.push_back(stream);
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    wait_pending();
    release_cached_segments();
  }

  // Destructor's part: everything given back that can be; the count of blocks still in use.
  std::pair<std::size_t, std::size_t> release_all() noexcept {
    std::lock_guard lock(mutex_);
    try {
      wait_pending();
    } catch (const std::exception& e) {
      log::get("memory")->error("{}: waiting for pending uses at shutdown failed: {}",
                                source_.describe(), e.what());
    }
    release_cached_segments();
    std::size_t live = 0, live_bytes = 0;
    for (const auto& [ptr, block] : blocks_) {
      if (block->allocated || block->pending > 0) {
        ++live;
        live_bytes += block->size;
      }
    }
    return {live, live_bytes};
  }

  AllocatorStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  using Pool = std::set<Block*, BlockOrder>;
  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }

  Block* allocated_block(void* ptr, const char* operation) {
    auto it = blocks_.find(static_cast<char*>(ptr));
    if (it == blocks_.end() || !it->second->allocated) {
      throw InternalError(fmt::format("{}: {} of {}, which this allocator did not hand out or "
                                      "which was freed already",
                                      source_.describe(), operation, ptr));
    }
    return it->second.get();
  }

  Block* take_best_fit(bool small, std::size_t size, StreamId stream) {
    Pool& pool = pool_of(small);
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    pool.erase(it);
    return block;
  }

  std::size_t segment_size(bool small, std::size_t size) const {
    if (small) return options_.small_segment;
    if (size < options_.large_segment / 2) return options_.large_segment;
    return round_up(size, options_.large_round);
  }

  Block* new_segment(bool small, std::size_t size, StreamId stream, std::size_t requested) {
    const std::size_t bytes = segment_size(small, size);
    void* ptr = source_.allocate(bytes);
    if (ptr == nullptr) {
      // The cache may hold enough in other streams' or other sizes' segments: give it back.
      ++stats_.cache_flushes;
      wait_pending();
      release_cached_segments();
      ptr = source_.allocate(bytes);
    }
    if (ptr == nullptr) {
      throw OutOfMemoryError(fmt::format(
          "{}: out of memory allocating {} (a segment of {}) for stream {:#x}: {} in use "
          "({} requested), {} reserved in {} segments after returning the free cache",
          source_.describe(), format_bytes(requested), format_bytes(bytes), stream,
          format_bytes(stats_.bytes_in_use), format_bytes(stats_.bytes_requested),
          format_bytes(stats_.bytes_reserved), stats_.segments));
    }
    auto block = std::make_unique<Block>();
    block->ptr = static_cast<char*>(ptr);
    block->size = bytes;
    block->stream = stream;
    block->small = small;
    Block* raw = block.get();
    try {
      blocks_.emplace(raw->ptr, std::move(block));
    } catch (...) {
      source_.release(ptr, bytes);
      throw;
    }
    ++stats_.source_allocations;
    ++stats_.segments;
    stats_.bytes_reserved += bytes;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
    return raw;
  }

  // Cuts `block` down to `size`, caching the rest as a block of its own when it is worth it.
  void split(Block* block, std::size_t size) {
    const std::size_t rest = block->size - size;
    const bool worth_it = block->small ? rest >= options_.round_bytes : rest > options_.small_limit;
    if (!worth_it) return;
    auto tail = std::make_unique<Block>();
    tail->ptr = block->ptr + size;
    tail->size = rest;
    tail->stream = block->stream;
    tail->small = block->small;
    tail->prev = block;
    tail->next = block->next;
    Block* raw = tail.get();
    blocks_.emplace(raw->ptr, std::move(tail));
    if (raw->next != nullptr) raw->next->prev = raw;
    block->next = raw;
    block->size = size;
    pool_of(raw->small).insert(raw);
  }

  // Puts a free block back in its pool, merged with free neighbours of its segment.
  void cache(Block* block) {
    Pool& pool = pool_of(block->small);
    if (Block* prev = block->prev; prev != nullptr && is_cached(prev)) {
      pool.erase(prev);
      prev->size += block->size;
      prev->next = block->next;
      if (block->next != nullptr) block->next->prev = prev;
      blocks_.erase(block->ptr);  // destroys `block`
      block = prev;
    }
    if (Block* next = block->next; next != nullptr && is_cached(next)) {
      pool.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (next->next != nullptr) next->next->prev = block;
      blocks_.erase(next->ptr);
    }
    pool.insert(block);
  }

  void finish_use(Block* block) {
    if (--block->pending > 0) return;
    stats_.bytes_pending -= block->size;
    cache(block);
  }

  // Caches the freed blocks whose other-stream work has finished (never blocks).
  void collect_finished() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!source_.event_done(it->first)) {
        ++it;
        continue;
      }
      source_.release_event(it->first);
      Block* block = it->second;
      it = pending_.erase(it);
      finish_use(block);
    }
  }

  void wait_pending() {
    while (!pending_.empty()) {
      auto [event, block] = pending_.front();
      source_.wait_event(event);
      source_.release_event(event);
      pending_.pop_front();
      finish_use(block);
    }
  }

  void release_cached_segments() {
    for (Pool* pool : {&small_pool_, &large_pool_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->prev != nullptr || block->next != nullptr) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        source_.release(block->ptr, block->size);
        ++stats_.source_releases;
        --stats_.segments;
        stats_.bytes_reserved -= block->size;
        blocks_.erase(block->ptr);
      }
    }
  }

  MemorySource& source_;
  const CachingAllocatorOptions& options_;
  mutable std::mutex mutex_;
  std::unordered_map<char*, std::unique_ptr<Block>> blocks_;  // every block, by address
  Pool small_pool_;
  Pool large_pool_;
  std::deque<std::pair<EventId, Block*>> pending_;  // one entry per (freed block, other stream)
  AllocatorStats stats_;
};

CachingAllocator::CachingAllocator(std::unique_ptr<MemorySource> source,
                                   CachingAllocatorOptions options)
    : source_(std::move(source)), options_(options) {
  if (!source_) throw InternalError("CachingAllocator: no memory source");
  const auto power_of_two = [](std::size_t v) { return v != 0 && (v & (v - 1)) == 0; };
  if (!power_of_two(options_.round_bytes) || options_.small_segment < options_.small_limit ||
      options_.small_segment % options_.round_bytes != 0 ||
      options_.large_segment % options_.round_bytes != 0 ||
      options_.large_round % options_.round_bytes != 0 || options_.large_round == 0) {
    throw ConfigError(fmt::format(
        "{}: caching allocator options: round_bytes {} must be a power of two dividing the "
        "segment sizes (small {}, large {}, large round {}), and small segments must hold "
        "the small limit {}",
        source_->describe(), options_.round_bytes, options_.small_segment,
        options_.large_segment, options_.large_round, options_.small_limit));
  }
  pools_ = std::make_unique<Pools>(*source_, options_);
}

CachingAllocator::~CachingAllocator() {
  const auto [live, live_bytes] = pools_->release_all();
  if (live > 0) {
    try {
      log::get("memory")->error("{}: {} blocks ({}) still in use when the allocator closed; "
                                "their segments are left allocated",
                                source_->describe(), live, format_bytes(live_bytes));
    } catch (...) {
      // Nothing more to do in a destructor.
    }
  }
}

void* CachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  return pools_->allocate(bytes, stream);
}

void CachingAllocator::free(void* ptr) { pools_->free(ptr); }

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  pools_->record_stream(ptr, stream);
}

void CachingAllocator::empty_cache() { pools_->empty_cache(); }

AllocatorStats CachingAllocator::stats() const { return pools_->stats(); }

std::string CachingAllocator::describe() const { return source_->describe(); }

void PooledBuffer::reset() noexcept {
  if (ptr_ == nullptr) return;
  try {
    allocator_->free(ptr_);
  } catch (const std::exception& e) {
    try {
      log::get("memory")->error("giving back a pooled buffer failed: {}", e.what());
    } catch (...) {
      // Nothing more to do in a noexcept path.
    }
  }
  ptr_ = nullptr;
  allocator_ = nullptr;
  bytes_ = 0;
}

}  // namespace aiacc::memory
