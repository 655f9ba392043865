// Large arrays on transparent huge pages.
//
// A parameter-server shard looks up rows at random over tens of megabytes: with 4 KiB pages
// nearly every lookup also misses the TLB, and under a hypervisor a TLB miss walks two page
// tables. Arrays of 2 MiB and more are therefore placed on 2 MiB boundaries and marked
// MADV_HUGEPAGE, so a kernel whose transparent huge pages are set to "madvise" (Debian's
// default) or "always" backs them with huge pages. Measured on the 2-core VM
// (aiacc-bench-kernels, adagrad pushes of 100k distinct rows of dim 8 into a 2M-row table,
// medians of five alternations with AIACC_HUGE_PAGES=0): 5.5 against 8.6 ms with one partition,
// 7.3 against 9.7 ms with sixteen. Where huge pages are off this is plain page-aligned memory.
// Smaller arrays come from operator new (64-byte aligned): a huge page for a small table would
// make a whole 2 MiB resident for a few kilobytes.
#pragma once

#include <cstddef>
#include <new>

namespace aiacc::memory {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// `bytes` uninitialised bytes, 64-byte aligned; from kHugePageBytes up also 2 MiB aligned and
// advised as huge pages. Null when the memory is not available (or bytes is 0).
void* allocate_large(std::size_t bytes) noexcept;
// Frees what allocate_large(bytes) returned (the same `bytes`); null is ignored.
void free_large(void* memory, std::size_t bytes) noexcept;

// For std::unique_ptr: frees an allocate_large block of `bytes`.
struct LargeFree {
  std::size_t bytes = 0;
  void operator()(void* memory) const noexcept { free_large(memory, bytes); }
};

// A standard allocator over allocate_large, for std::vector of large tables.
template <class T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: allocator rebind

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    void* memory = allocate_large(n * sizeof(T));
    if (memory == nullptr && n > 0) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, std::size_t n) noexcept { free_large(memory, n * sizeof(T)); }

  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

}  // namespace aiacc::memory
