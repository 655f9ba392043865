// keep_freed_message_memory: afterwards a large block comes from the heap and freeing it keeps
// the heap mapped. Under glibc's defaults both expectations fail: an 8 MiB block is a fresh
// mapping, and a freed heap top above 128 KiB is trimmed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/net/message_memory.h"

namespace aiacc::net {
namespace {

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
TEST(MessageMemory, LargeBlocksComeFromTheHeapAndStayMapped) {
  if (!keep_freed_message_memory()) {
    GTEST_SKIP() << "the environment sets malloc's thresholds itself (GLIBC_TUNABLES or MALLOC_*_)";
  }
  constexpr std::size_t kBytes = 8 << 20;
  const auto mapped_before = mallinfo2().hblks;
  // volatile: otherwise the compiler may drop the malloc, memset and free as unobserved.
  char* volatile block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  EXPECT_EQ(mallinfo2().hblks, mapped_before) << "an 8 MiB block was mmapped, not taken from the heap";

  const auto heap_before_free = mallinfo2().arena;
  std::free(block);
  EXPECT_EQ(mallinfo2().arena, heap_before_free) << "freeing 8 MiB trimmed the heap";
}

TEST(MessageMemory, TheUsersOwnSettingsWin) {
  ASSERT_EQ(setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1), 0);
  EXPECT_FALSE(keep_freed_message_memory());
  unsetenv("MALLOC_TRIM_THRESHOLD_");
}
#endif

}  // namespace
}  // namespace aiacc::net
