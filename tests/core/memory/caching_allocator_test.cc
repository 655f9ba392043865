// CachingAllocator against a fake device: host memory with a capacity, and events that finish
// only when the test says their stream's work is done. The allocator's promises are checked
// from the outside: what the "device" was asked for, which addresses came back, and that no
// two live blocks ever overlap.
#include "core/memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"

namespace aiacc::memory {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// The fake device's state, shared by the test and the source the allocator owns.
struct FakeDevice {
  std::size_t capacity = std::size_t{1} << 40;
  std::size_t live_bytes = 0;
  std::map<void*, std::size_t> live;
  int allocations = 0;
  int releases = 0;
  int waits = 0;
  int events_released = 0;
  std::vector<std::pair<StreamId, bool>> events;  // EventId k is events[k - 1]: (stream, done)

  // The work queued on `stream` so far has run.
  void finish(StreamId stream) {
    for (auto& [s, done] : events) {
      if (s == stream) done = true;
    }
  }
  ~FakeDevice() {
    for (auto& [ptr, bytes] : live) std::free(ptr);
  }
};

class FakeSource : public MemorySource {
 public:
  explicit FakeSource(std::shared_ptr<FakeDevice> device) : device_(std::move(device)) {}
  void* allocate(std::size_t bytes) override {
    if (device_->live_bytes + bytes > device_->capacity) return nullptr;
    void* ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (ptr == nullptr) return nullptr;
    device_->live[ptr] = bytes;
    device_->live_bytes += bytes;
    ++device_->allocations;
    return ptr;
  }
  void release(void* ptr, std::size_t bytes) noexcept override {
    auto it = device_->live.find(ptr);
    ASSERT_NE(it, device_->live.end()) << "release of memory the device never handed out";
    EXPECT_EQ(it->second, bytes) << "release with a different size";
    device_->live_bytes -= it->second;
    device_->live.erase(it);
    std::free(ptr);
    ++device_->releases;
  }
  EventId record_event(StreamId stream) override {
    device_->events.emplace_back(stream, false);
    return device_->events.size();
  }
  bool event_done(EventId event) override { return device_->events.at(event - 1).second; }
  void wait_event(EventId event) override {
    ++device_->waits;
    device_->events.at(event - 1).second = true;
  }
  void release_event(EventId) noexcept override { ++device_->events_released; }
  std::string describe() const override { return "fake device"; }

 private:
  std::shared_ptr<FakeDevice> device_;
};

struct Fixture {
  std::shared_ptr<FakeDevice> device = std::make_shared<FakeDevice>();
  std::unique_ptr<CachingAllocator> allocator;
  explicit Fixture(CachingAllocatorOptions options = {})
      : allocator(std::make_unique<CachingAllocator>(std::make_unique<FakeSource>(device), options)) {}
};

constexpr StreamId kCompute = 0x10, kComm = 0x20, kCopy = 0x30;

std::uintptr_t address(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(CachingAllocator, RoundsSizesAndAlignsBlocks) {
  Fixture f;
  std::vector<void*> blocks;
  for (std::size_t bytes : {0, 1, 511, 512, 513, 1000}) {
    void* p = f.allocator->allocate(bytes, kCompute);
    EXPECT_EQ(address(p) % 512, 0u) << bytes << " bytes";
    blocks.push_back(p);
  }
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.bytes_in_use, 512u * 4 + 1024u * 2);
  EXPECT_EQ(s.bytes_requested, 0u + 1 + 511 + 512 + 513 + 1000);
  EXPECT_EQ(s.source_allocations, 1);  // all from one small segment
  EXPECT_EQ(s.bytes_reserved, 2 * MiB);
  for (void* p : blocks) f.allocator->free(p);
  EXPECT_EQ(f.allocator->stats().bytes_in_use, 0u);
  EXPECT_EQ(f.allocator->stats().bytes_requested, 0u);
}

TEST(CachingAllocator, SegmentSizesFollowTheRequest) {
  Fixture f;
  void* c = f.allocator->allocate(11 * MiB, kCompute);  // at least half of 20 MiB: own segment
  EXPECT_EQ(f.device->live.at(c), 12 * MiB);            // rounded up to 2 MiB
  EXPECT_EQ(f.allocator->stats().bytes_in_use, 12 * MiB);  // a 1 MiB rest is not split off
  void* a = f.allocator->allocate(3 * MiB, kCompute);   // large: a shared 20 MiB segment
  EXPECT_EQ(f.device->live.at(a), 20 * MiB);
  void* b = f.allocator->allocate(3 * MiB, kCompute);   // cut from the same one
  EXPECT_EQ(f.device->allocations, 2);
  EXPECT_EQ(address(b), address(a) + 3 * MiB);
  void* d = f.allocator->allocate(MiB, kCompute);       // small (at most 1 MiB): 2 MiB segment
  EXPECT_EQ(f.device->allocations, 3);
  EXPECT_EQ(f.device->live.at(d), 2 * MiB);
  for (void* p : {a, b, c, d}) f.allocator->free(p);
  EXPECT_EQ(f.allocator->stats().segments, 3);
  f.allocator->empty_cache();
  EXPECT_EQ(f.device->live_bytes, 0u);
  EXPECT_EQ(f.allocator->stats().bytes_reserved, 0u);
  EXPECT_EQ(f.allocator->stats().source_releases, 3);
}

TEST(CachingAllocator, FreedNeighboursMergeAndServeALargerRequest) {
  Fixture f;
  void* a = f.allocator->allocate(256 * KiB, kCompute);
  void* b = f.allocator->allocate(256 * KiB, kCompute);
  void* c = f.allocator->allocate(256 * KiB, kCompute);
  f.allocator->free(b);
  f.allocator->free(a);
  // a and b merged into one 512 KiB block: the best fit for 512 KiB, no new segment.
  void* ab = f.allocator->allocate(512 * KiB, kCompute);
  EXPECT_EQ(ab, a);
  EXPECT_EQ(f.device->allocations, 1);
  f.allocator->free(ab);
  f.allocator->free(c);
  // Everything merged back: the whole segment is one free block and can be returned.
  f.allocator->empty_cache();
  EXPECT_EQ(f.device->releases, 1);
  EXPECT_TRUE(f.device->live.empty());
}

TEST(CachingAllocator, BestFitTakesTheSmallestBlockThatFits) {
  Fixture f;
  void* big = f.allocator->allocate(64 * KiB, kCompute);
  void* keep1 = f.allocator->allocate(KiB, kCompute);
  void* small = f.allocator->allocate(4 * KiB, kCompute);
  void* keep2 = f.allocator->allocate(KiB, kCompute);
  f.allocator->free(big);
  f.allocator->free(small);
  void* fit3 = f.allocator->allocate(3 * KiB, kCompute);
  void* fit5 = f.allocator->allocate(5 * KiB, kCompute);
  EXPECT_EQ(fit3, small);
  EXPECT_EQ(fit5, big);  // split off the front of the 64 KiB
  for (void* p : {keep1, keep2, fit3, fit5}) f.allocator->free(p);
}

TEST(CachingAllocator, StreamsKeepTheirOwnBlocks) {
  Fixture f;
  void* a = f.allocator->allocate(4 * KiB, kCompute);
  f.allocator->free(a);
  void* b = f.allocator->allocate(4 * KiB, kComm);  // another stream: not a's block
  EXPECT_NE(b, a);
  EXPECT_EQ(f.device->allocations, 2);
  void* again = f.allocator->allocate(4 * KiB, kCompute);
  EXPECT_EQ(again, a);  // a's own stream reuses it at once
  f.allocator->free(again);
  f.allocator->free(b);
  // A stream ordered before the others, which has no segment yet: still not b's block.
  const StreamId early_stream = 0x1;
  void* c = f.allocator->allocate(4 * KiB, early_stream);
  EXPECT_NE(c, b);
  EXPECT_EQ(f.device->allocations, 3);
  EXPECT_EQ(f.device->events.size(), 0u);  // same-stream reuse needs no event
  f.allocator->free(c);
}

TEST(CachingAllocator, AUseOnAnotherStreamDelaysReuseUntilItsWorkIsDone) {
  Fixture f;
  void* a = f.allocator->allocate(KiB, kCompute);
  f.allocator->record_stream(a, kComm);
  f.allocator->record_stream(a, kComm);     // once is enough
  f.allocator->record_stream(a, kCompute);  // its own stream: nothing to wait for
  f.allocator->free(a);
  ASSERT_EQ(f.device->events.size(), 1u);
  EXPECT_EQ(f.allocator->stats().bytes_pending, KiB);
  void* b = f.allocator->allocate(KiB, kCompute);
  EXPECT_NE(b, a) << "reused while the comm stream may still read it";
  f.device->finish(kComm);
  void* c = f.allocator->allocate(KiB, kCompute);
  EXPECT_EQ(c, a);
  EXPECT_EQ(f.allocator->stats().bytes_pending, 0u);
  EXPECT_EQ(f.device->events_released, 1);
  EXPECT_EQ(f.device->waits, 0);  // polled, never waited for
  f.allocator->free(b);
  f.allocator->free(c);
}

// Pinned staging memory: the host writes a reused block at once, so even a block used only on
// its own stream waits for that stream's work (an async copy may still read it).
TEST(CachingAllocator, HostWrittenMemoryWaitsForItsOwnStream) {
  CachingAllocatorOptions options;
  options.free_waits_for_own_stream = true;
  Fixture f(options);
  void* staging = f.allocator->allocate(64 * KiB, kCopy);
  f.allocator->free(staging);  // the copy queued on kCopy may still read it
  void* next = f.allocator->allocate(64 * KiB, kCopy);
  EXPECT_NE(next, staging);
  f.device->finish(kCopy);
  f.allocator->free(next);
  void* again = f.allocator->allocate(64 * KiB, kCopy);
  EXPECT_EQ(again, staging);
  f.allocator->free(again);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingUses) {
  Fixture f;
  void* a = f.allocator->allocate(KiB, kCompute);
  f.allocator->record_stream(a, kCopy);
  f.allocator->free(a);
  f.allocator->empty_cache();
  EXPECT_EQ(f.device->waits, 1);
  EXPECT_TRUE(f.device->live.empty());
}

// The promise: the allocator stops calling the device's allocator after the first
// step. A step here allocates activations in forward order, frees some during backward, hands
// gradient buckets to a communication stream, and frees the rest at its end.
TEST(CachingAllocator, SteadyTrainingStepsNeverCallTheSource) {
  Fixture f;
  const std::vector<std::size_t> activations = {
      6 * MiB + 123, 3 * MiB, 3 * MiB, 768 * KiB, 768 * KiB, 200 * KiB, 48 * KiB + 4,
      12 * MiB, 1 * MiB + 1, 4 * KiB, 96, 100 * KiB, 25 * MiB, 512, 2 * MiB + 512};
  const std::vector<std::size_t> buckets = {4 * MiB, 4 * MiB, 1500 * KiB, 33 * KiB};
  std::vector<int> after_step;
  for (int step = 0; step < 8; ++step) {
    std::vector<void*> live;
    for (std::size_t bytes : activations) live.push_back(f.allocator->allocate(bytes, kCompute));
    // Backward: temporaries and buckets; every other activation freed as its gradient is done.
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      void* temp = f.allocator->allocate(buckets[i] / 2 + 7, kCompute);
      void* bucket = f.allocator->allocate(buckets[i], kCompute);
      f.allocator->record_stream(bucket, kComm);
      f.allocator->free(temp);
      f.allocator->free(live[2 * i]);
      live[2 * i] = nullptr;
      f.allocator->free(bucket);  // the all-reduce on kComm may still read it
    }
    for (void* p : live) {
      if (p != nullptr) f.allocator->free(p);
    }
    f.device->finish(kComm);  // the step ends when its communication has finished
    after_step.push_back(f.device->allocations);
  }
  for (std::size_t s = 1; s < after_step.size(); ++s) {
    EXPECT_EQ(after_step[s], after_step[0]) << "step " << s << " called the source";
  }
  EXPECT_EQ(f.device->releases, 0);
  EXPECT_EQ(f.allocator->stats().cache_flushes, 0);
}

TEST(CachingAllocator, OutOfMemoryReturnsTheCacheAndRetriesThenThrows) {
  Fixture f;
  f.device->capacity = 22 * MiB;
  void* a = f.allocator->allocate(3 * MiB, kCompute);  // a 20 MiB segment
  f.allocator->free(a);                                // cached for kCompute
  void* b = f.allocator->allocate(3 * MiB, kComm);     // needs another: only after the flush
  EXPECT_EQ(f.allocator->stats().cache_flushes, 1);
  EXPECT_EQ(f.device->releases, 1);
  try {
    f.allocator->allocate(30 * MiB, kComm);
    FAIL() << "no OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fake device: out of memory allocating 30.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("3.00 MiB in use"), std::string::npos) << what;
    EXPECT_NE(what.find("20.00 MiB reserved in 1 segments"), std::string::npos) << what;
  }
  // A negative size cast to size_t is refused, not rounded to nothing.
  EXPECT_THROW(f.allocator->allocate(static_cast<std::size_t>(-100), kComm), OutOfMemoryError);
  // Nothing was lost: the allocator still serves and gives back.
  f.allocator->free(b);
  void* c = f.allocator->allocate(5 * MiB, kComm);
  EXPECT_EQ(c, b);
  f.allocator->free(c);
  f.allocator->empty_cache();
  EXPECT_TRUE(f.device->live.empty());
}

TEST(CachingAllocator, ForeignOrTwiceFreedPointersAreRefused) {
  Fixture f;
  int on_the_stack = 0;
  EXPECT_THROW(f.allocator->free(&on_the_stack), InternalError);
  void* a = f.allocator->allocate(100, kCompute);
  f.allocator->free(a);
  EXPECT_THROW(f.allocator->free(a), InternalError);
  EXPECT_THROW(f.allocator->record_stream(a, kComm), InternalError);
}

TEST(CachingAllocator, BadOptionsAreAConfigError) {
  auto device = std::make_shared<FakeDevice>();
  CachingAllocatorOptions options;
  options.round_bytes = 500;
  EXPECT_THROW(CachingAllocator(std::make_unique<FakeSource>(device), options), ConfigError);
  options = {};
  options.small_segment = 512 * KiB;  // cannot hold a 1 MiB small request
  EXPECT_THROW(CachingAllocator(std::make_unique<FakeSource>(device), options), ConfigError);
}

TEST(CachingAllocator, PooledBufferGivesItsBlockBack) {
  Fixture f;
  {
    PooledBuffer a(*f.allocator, 1000, kCompute);
    EXPECT_EQ(a.bytes(), 1000u);
    EXPECT_EQ(f.allocator->stats().bytes_in_use, 1024u);
    PooledBuffer b = std::move(a);
    EXPECT_FALSE(a);
    EXPECT_TRUE(b);
    b.data<char>()[999] = 1;
    PooledBuffer c(*f.allocator, 10, kCompute);
    c = std::move(b);  // c's own block goes back first
    EXPECT_EQ(f.allocator->stats().bytes_in_use, 1024u);
  }
  EXPECT_EQ(f.allocator->stats().bytes_in_use, 0u);
}

TEST(CachingAllocator, ClosingWithLiveBlocksKeepsTheirSegments) {
  Fixture f;
  void* kept = f.allocator->allocate(KiB, kCompute);
  void* freed = f.allocator->allocate(3 * MiB, kCompute);
  f.allocator->free(freed);
  f.allocator.reset();
  // The free large segment went back; the small one, still used, was not freed under its user.
  ASSERT_EQ(f.device->live.size(), 1u);
  EXPECT_EQ(f.device->live.begin()->second, 2 * MiB);
  EXPECT_LE(address(f.device->live.begin()->first), address(kept));
}

// Random allocations, frees, cross-stream uses and stream completions: every live block is
// disjoint from every other and keeps the bytes written into it, and the figures add up.
TEST(CachingAllocator, RandomWorkloadKeepsBlocksDisjointAndIntact) {
  CachingAllocatorOptions options;
  options.small_segment = 64 * KiB;  // small numbers, so segments fill, split and merge often
  options.small_limit = 16 * KiB;
  options.large_segment = 256 * KiB;
  options.large_round = 32 * KiB;
  Fixture f(options);
  f.device->capacity = 4 * MiB;  // tight enough that flushes happen
  std::mt19937_64 rng(7);
  struct Live {
    char* ptr;
    std::size_t bytes;
    unsigned char fill;
  };
  std::vector<Live> live;
  const StreamId streams[] = {kCompute, kComm, kCopy};
  const auto check_disjoint = [&] {
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
    for (const Live& l : live) ranges.emplace_back(address(l.ptr), address(l.ptr) + std::max<std::size_t>(l.bytes, 1));
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
  };
  int ooms = 0;
  for (int op = 0; op < 20000; ++op) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 5 || live.empty()) {
      const std::size_t bytes = (rng() % 4 == 0) ? rng() % (400 * KiB) : rng() % (20 * KiB);
      const StreamId stream = streams[rng() % 3];
      try {
        char* p = static_cast<char*>(f.allocator->allocate(bytes, stream));
        const auto fill = static_cast<unsigned char>(rng());
        std::memset(p, fill, bytes);
        live.push_back({p, bytes, fill});
      } catch (const OutOfMemoryError&) {
        ++ooms;
      }
    } else if (what < 9) {
      const std::size_t i = rng() % live.size();
      const Live l = live[i];
      for (std::size_t k = 0; k < l.bytes; k += 97) ASSERT_EQ(static_cast<unsigned char>(l.ptr[k]), l.fill);
      if (rng() % 3 == 0) f.allocator->record_stream(l.ptr, streams[rng() % 3]);
      f.allocator->free(l.ptr);
      live[i] = live.back();
      live.pop_back();
    } else {
      f.device->finish(streams[rng() % 3]);
    }
    if (op % 100 == 0) check_disjoint();
  }
  std::size_t requested = 0;
  for (const Live& l : live) requested += l.bytes;
  EXPECT_EQ(f.allocator->stats().bytes_requested, requested);
  EXPECT_GT(f.allocator->stats().cache_flushes, 0) << "the workload never ran out: make it tighter";
  EXPECT_LE(f.device->live_bytes, f.device->capacity);
  for (const Live& l : live) f.allocator->free(l.ptr);
  f.allocator->empty_cache();
  const AllocatorStats s = f.allocator->stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_pending, 0u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.segments, 0);
  EXPECT_TRUE(f.device->live.empty());
  EXPECT_EQ(f.device->events_released, static_cast<int>(f.device->events.size()));
  (void)ooms;
}

}  // namespace
}  // namespace aiacc::memory
