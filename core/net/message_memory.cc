#include "core/net/message_memory.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace aiacc::net {

bool keep_freed_message_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return false;
  }
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 512 << 20;
  // Setting either value also turns off glibc's adaptive threshold, which would otherwise lower
  // the trim threshold again to twice the last freed mapping.
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

}  // namespace aiacc::net
