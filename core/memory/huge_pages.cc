// allocate_large: mmap with the slack trimmed to a 2 MiB boundary, then madvise.
#include "core/memory/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace aiacc::memory {
namespace {

constexpr std::align_val_t kSmallAlignment{64};

constexpr std::size_t kPageBytes = 4096;

// The mapping's length: whole 4 KiB pages. The kernel backs the 2 MiB-aligned stretches inside
// it with huge pages and the tail with small ones, so rounding up to 2 MiB would only make a
// partly used last huge page resident.
std::size_t mapped_bytes(std::size_t bytes) { return (bytes + kPageBytes - 1) & ~(kPageBytes - 1); }

// AIACC_HUGE_PAGES=0 leaves the advice out (to compare, or where huge pages misbehave).
bool advise_huge_pages() {
  static const bool advise = [] {
    const char* value = std::getenv("AIACC_HUGE_PAGES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return advise;
}

}  // namespace

void* allocate_large(std::size_t bytes) noexcept {
  if (bytes == 0) return nullptr;
  if (bytes < kHugePageBytes) return ::operator new(bytes, kSmallAlignment, std::nothrow);
  if (bytes > static_cast<std::size_t>(-1) - 2 * kHugePageBytes) return nullptr;
  const std::size_t size = mapped_bytes(bytes);
  // Map one huge page more than needed and unmap the ends, so the block starts on a 2 MiB
  // boundary whatever address the kernel picks.
  const std::size_t mapped = size + kHugePageBytes;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~std::uintptr_t{kHugePageBytes - 1};
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + mapped;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  // Advice only: EINVAL on a kernel without transparent huge pages leaves normal pages, which
  // work the same, more slowly.
  if (advise_huge_pages()) ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void free_large(void* memory, std::size_t bytes) noexcept {
  if (memory == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(memory, kSmallAlignment);
    return;
  }
  ::munmap(memory, mapped_bytes(bytes));
}

}  // namespace aiacc::memory
