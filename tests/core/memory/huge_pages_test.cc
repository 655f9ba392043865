// allocate_large: alignment, usable bytes, the huge-page advice where the kernel takes it, and
// HugePageAllocator under std::vector.
#include "core/memory/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace aiacc::memory {
namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Writes a pattern over all `bytes` and reads it back: every byte handed out is usable.
void expect_usable(void* memory, std::size_t bytes) {
  auto* b = static_cast<unsigned char*>(memory);
  b[bytes - 1] = 0xa5;
  for (std::size_t i = 0; i + 1 < bytes; i += 4093) b[i] = static_cast<unsigned char>(i * 7);
  for (std::size_t i = 0; i + 1 < bytes; i += 4093) ASSERT_EQ(b[i], static_cast<unsigned char>(i * 7)) << i;
  EXPECT_EQ(b[bytes - 1], 0xa5);
}

TEST(HugePages, SmallBlocksAreCacheLineAligned) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, kHugePageBytes - 1}) {
    void* p = allocate_large(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(address(p) % 64, 0u) << bytes;
    expect_usable(p, bytes);
    free_large(p, bytes);
  }
  EXPECT_EQ(allocate_large(0), nullptr);
  free_large(nullptr, 0);  // ignored
}

TEST(HugePages, LargeBlocksStartOnAHugePage) {
  for (std::size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 12345}) {
    void* p = allocate_large(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(address(p) % kHugePageBytes, 0u) << bytes;
    expect_usable(p, bytes);
    free_large(p, bytes);
  }
}

TEST(HugePages, ImpossibleSizesFailWithoutThrowing) {
  EXPECT_EQ(allocate_large(static_cast<std::size_t>(-1) - 10), nullptr);
  HugePageAllocator<double> allocator;
  EXPECT_THROW((void)allocator.allocate(static_cast<std::size_t>(-1) / 4), std::bad_array_new_length);
}

TEST(HugePages, VectorsOfTheAllocatorBehaveLikeVectors) {
  std::vector<std::int64_t, HugePageAllocator<std::int64_t>> v;
  for (std::int64_t i = 0; i < 600000; ++i) v.push_back(i * 3);  // grows through 2 MiB
  EXPECT_EQ(address(v.data()) % kHugePageBytes, 0u);
  for (std::int64_t i = 0; i < 600000; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i * 3);
  v.resize(10);
  v.shrink_to_fit();
  EXPECT_EQ(v.back(), 27);
}

// Where transparent huge pages are "madvise" or "always", the advised block is eligible: the
// mapping that holds it reports THPeligible in /proc/self/smaps.
TEST(HugePages, TheKernelSeesTheAdvice) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.find("[never]") != std::string::npos || mode.empty()) {
    GTEST_SKIP() << "transparent huge pages are off on this machine (" << mode << ")";
  }
  const std::size_t bytes = 2 * kHugePageBytes;
  std::unique_ptr<void, LargeFree> block(allocate_large(bytes), LargeFree{bytes});
  ASSERT_NE(block, nullptr);
  std::memset(block.get(), 1, bytes);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_block = false;
  bool eligible = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      in_block = begin <= address(block.get()) && address(block.get()) < end;
      continue;
    }
    if (in_block && line.rfind("THPeligible:", 0) == 0) eligible = line.find('1') != std::string::npos;
  }
  EXPECT_TRUE(eligible) << "the block's mapping is not eligible for huge pages (mode " << mode << ")";
}

}  // namespace
}  // namespace aiacc::memory
