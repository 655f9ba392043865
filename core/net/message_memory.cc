#include "core/net/message_memory.h"

#include <cstdlib>
#include <string_view>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/log.h"

namespace aiacc::net {
namespace {

// Whether GLIBC_TUNABLES (colon-separated name=value pairs) names either threshold.
bool tunables_set_thresholds(std::string_view tunables) {
  while (!tunables.empty()) {
    const auto colon = tunables.find(':');
    const std::string_view item = tunables.substr(0, colon);
    const std::string_view name = item.substr(0, item.find('='));
    if (name == "glibc.malloc.mmap_threshold" || name == "glibc.malloc.trim_threshold") return true;
    if (colon == std::string_view::npos) break;
    tunables.remove_prefix(colon + 1);
  }
  return false;
}

}  // namespace

bool keep_freed_message_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables != nullptr && tunables_set_thresholds(tunables)) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    log::get("net")->info("malloc thresholds left as the environment sets them");
    return false;
  }
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 512 << 20;
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  if (!mmap_set || !trim_set) {
    // A replaced allocator (a sanitizer's, jemalloc through LD_PRELOAD) refuses: large receives
    // then cost page faults, nothing worse.
    log::get("net")->info("malloc refused to keep freed message memory (mmap threshold {}, trim threshold {})",
                          mmap_set ? "set" : "refused", trim_set ? "set" : "refused");
    return false;
  }
  log::get("net")->debug("malloc keeps freed message memory (blocks up to 32 MiB from the heap, 512 MiB of free top kept)");
  return true;
#else
  return false;
#endif
}

}  // namespace aiacc::net
