// CachingAllocator: stream-ordered caching of device (or pinned host) memory, so a training
// step after the first one never calls the driver's allocator (cudaMalloc synchronises the
// device and costs 10-100 us; a ResNet step allocates hundreds of temporaries).
//
// Device-independent on purpose: memory, streams and events come from a MemorySource (CUDA's
// in core/cuda/device_memory.h; tests use host memory and hand-driven events), so the caching
// rules below are tested on every machine, GPU or not.
//
// The rules (the ones PyTorch's CUDA caching allocator established):
//   - Every block is a multiple of options.round_bytes (512) and starts on such a boundary.
//   - Requests of at most small_limit (1 MiB) are cut from small segments (2 MiB); larger ones
//     from large segments: large_segment (20 MiB) when the request is below half of it, else
//     a segment of the request rounded up to large_round (2 MiB). Small and large blocks never
//     share a segment, so small temporaries cannot pin a big segment.
//   - A segment belongs to the stream it was first allocated for; its blocks are only handed to
//     requests on that stream. Work queued on one stream runs in order, so a block freed on its
//     stream may be reused at once by later work on the same stream, without any sync.
//   - A block also used on another stream (record_stream) goes back to the cache only when the
//     work queued on those streams at free() time has finished (an event per stream, polled
//     at the next allocate()). With free_waits_for_own_stream (pinned host memory, which the
//     CPU writes without waiting for any stream) its own stream's work counts too.
//   - Best fit: the smallest free block of the stream that is large enough; the rest is split
//     off when it is at least round_bytes (small) or above small_limit (large). Freed blocks
//     merge with free neighbours of their segment.
//   - Out of memory: wait for pending cross-stream uses, return every wholly free segment to
//     the source and try once more; then throw OutOfMemoryError with the allocator's figures.
// Thread-safe (one mutex). The allocator must outlive every block it handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace aiacc::memory {

// An opaque stream (a cudaStream_t on GPUs); work queued on one stream runs in order.
using StreamId = std::uintptr_t;
// An opaque marker of the work queued on a stream up to some point (a cudaEvent_t on GPUs).
using EventId = std::uintptr_t;

// Where the memory comes from, and how the allocator learns that queued work has finished.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // `bytes` of fresh memory, or null when the device is out of memory (other failures throw).
  virtual void* allocate(std::size_t bytes) = 0;
  // Gives back memory from allocate() (never throws: failures are logged).
  virtual void release(void* ptr, std::size_t bytes) noexcept = 0;
  // Marks the work queued on `stream` so far.
  virtual EventId record_event(StreamId stream) = 0;
  // Whether the work an event marks has finished (never blocks).
  virtual bool event_done(EventId event) = 0;
  // Blocks until the work an event marks has finished.
  virtual void wait_event(EventId event) = 0;
  virtual void release_event(EventId event) noexcept = 0;
  // "cuda device 0", "pinned host memory": names the memory in messages.
  virtual std::string describe() const = 0;
};

struct CachingAllocatorOptions {
  std::size_t round_bytes = 512;           // block granularity and alignment (a power of two)
  std::size_t small_limit = 1u << 20;      // requests up to this come from small segments
  std::size_t small_segment = 2u << 20;    // size of a small segment
  std::size_t large_segment = 20u << 20;   // shared segment for large requests below half of it
  std::size_t large_round = 2u << 20;      // bigger requests: own segment rounded up to this
  // Pinned host memory: the CPU writes a reused block at once, without waiting for the streams,
  // so a freed block must first finish even its own stream's work (an event on that stream
  // too). Device memory is only touched by stream work, which runs in order: false.
  bool free_waits_for_own_stream = false;
};

// Counters since construction; bytes are rounded block sizes unless said otherwise.
struct AllocatorStats {
  std::int64_t allocations = 0;         // allocate() calls served
  std::int64_t source_allocations = 0;  // segments obtained from the source (cudaMalloc calls)
  std::int64_t source_releases = 0;     // segments given back
  std::int64_t cache_flushes = 0;       // times a failed source allocation emptied the cache
  std::int64_t segments = 0;            // segments held now
  std::size_t bytes_in_use = 0;
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_requested = 0;      // what callers asked for, of the blocks in use
  std::size_t bytes_reserved = 0;       // held from the source (in use + cached)
  std::size_t peak_bytes_reserved = 0;
  std::size_t bytes_pending = 0;        // freed blocks waiting for another stream's work
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<MemorySource> source,
                            CachingAllocatorOptions options = {});
  // Returns every segment to the source, waiting for pending cross-stream uses first. Blocks
  // still allocated are reported (an error in the log) and their segments kept, not freed
  // under a user that may still be running.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 counts as 1) for work on `stream`, aligned to round_bytes.
  // Throws OutOfMemoryError naming the request and the allocator's figures.
  void* allocate(std::size_t bytes, StreamId stream);
  // Gives back a block from allocate(). Throws InternalError for a pointer it never handed out.
  void free(void* ptr);
  // `ptr` is used by work on `stream` too: free() then waits for that work before reuse.
  void record_stream(void* ptr, StreamId stream);
  // Returns every wholly free segment to the source (after pending uses finish).
  void empty_cache();

  AllocatorStats stats() const;
  const CachingAllocatorOptions& options() const { return options_; }
  std::string describe() const;

 private:
  class Pools;
  std::unique_ptr<MemorySource> source_;
  CachingAllocatorOptions options_;
  std::unique_ptr<Pools> pools_;
};

// A block from a CachingAllocator, given back when destroyed. Move-only.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(CachingAllocator& allocator, std::size_t bytes, StreamId stream)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes, stream)), bytes_(bytes), stream_(stream) {}
  ~PooledBuffer() { reset(); }
  PooledBuffer(PooledBuffer&& other) noexcept { *this = std::move(other); }
  PooledBuffer& operator=(PooledBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      allocator_ = other.allocator_;
      ptr_ = other.ptr_;
      bytes_ = other.bytes_;
      stream_ = other.stream_;
      other.allocator_ = nullptr;
      other.ptr_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* data() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  StreamId stream() const { return stream_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  // See CachingAllocator::record_stream.
  void record_stream(StreamId stream) const { allocator_->record_stream(ptr_, stream); }
  // Gives the block back now (the allocator never throws for its own blocks).
  void reset() noexcept;

 private:
  CachingAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  StreamId stream_ = 0;
};

}  // namespace aiacc::memory
