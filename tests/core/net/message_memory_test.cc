// keep_freed_message_memory: afterwards a large block comes from the heap and freeing it keeps
// the heap mapped, on the main thread's arena and on another thread's (ZeroMQ receives on its
// I/O thread). Under glibc's defaults these expectations fail: an 8 MiB block is a fresh
// mapping, and a freed heap top above 128 KiB is trimmed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/net/message_memory.h"
#include "tests/testing/scoped_env.h"

namespace aiacc::net {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AIACC_REPLACED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define AIACC_REPLACED_MALLOC 1
#endif
#endif

using aiacc::testing::ScopedEnv;

#if defined(__GLIBC__) && !defined(AIACC_REPLACED_MALLOC)
// Allocates, touches and frees 8 MiB on the calling thread; reports whether it was mmapped and
// whether freeing it shrank the heap.
struct LargeBlockFate {
  bool mapped = false;
  bool trimmed = false;
};
LargeBlockFate allocate_and_free_large_block() {
  constexpr std::size_t kBytes = 8 << 20;
  LargeBlockFate fate;
  const auto mapped_before = mallinfo2().hblks;
  // volatile: otherwise the compiler may drop the malloc, memset and free as unobserved.
  char* volatile block = static_cast<char*>(std::malloc(kBytes));
  if (block == nullptr) std::abort();
  std::memset(block, 1, kBytes);
  fate.mapped = mallinfo2().hblks != mapped_before;
  const auto heap_before_free = mallinfo2().arena;
  std::free(block);
  fate.trimmed = mallinfo2().arena != heap_before_free;
  return fate;
}

TEST(MessageMemory, LargeBlocksComeFromTheHeapAndStayMappedOnEveryThread) {
  const ScopedEnv no_trim("MALLOC_TRIM_THRESHOLD_", std::nullopt);
  const ScopedEnv no_mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt);
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "threshold") != nullptr) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets a malloc threshold for this process already";
  }
  ASSERT_TRUE(keep_freed_message_memory());

  const LargeBlockFate main_thread = allocate_and_free_large_block();
  EXPECT_FALSE(main_thread.mapped) << "an 8 MiB block was mmapped, not taken from the heap";
  EXPECT_FALSE(main_thread.trimmed) << "freeing 8 MiB trimmed the heap";

  LargeBlockFate other_thread;
  std::thread([&] { other_thread = allocate_and_free_large_block(); }).join();
  EXPECT_FALSE(other_thread.mapped) << "another thread's 8 MiB block was mmapped";
  EXPECT_FALSE(other_thread.trimmed) << "freeing 8 MiB on another thread trimmed its arena";
}
#endif

TEST(MessageMemory, TheEnvironmentsOwnThresholdsWin) {
  {
    const ScopedEnv trim("MALLOC_TRIM_THRESHOLD_", "131072");
    EXPECT_FALSE(keep_freed_message_memory());
  }
  {
    const ScopedEnv tunables("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536");
    EXPECT_FALSE(keep_freed_message_memory());
  }
}

}  // namespace
}  // namespace aiacc::net
