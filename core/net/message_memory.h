// Process-wide malloc settings for programs that move large ZeroMQ messages: ZeroMQ mallocs the
// body of every received message, and under glibc's defaults each large one was a fresh mapping
// whose pages had to be faulted in again (README, "Dense collectives", has the figures).
#pragma once

namespace aiacc::net {

// Serves blocks up to 32 MiB (glibc's largest mmap threshold) from the heap and keeps up to
// 512 MiB of free memory at the top of each malloc arena mapped, so the same message sizes, step
// after step, reuse memory that is already resident. The price is resident memory: freed blocks
// stay with the process (fragmented free space below live blocks never went back anyway).
//
// Leaves malloc alone where the environment sets either threshold (glibc.malloc.mmap_threshold
// or glibc.malloc.trim_threshold in GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_), and does nothing outside glibc. Logs which of these happened and
// returns whether the settings were applied.
//
// Process-wide: call it once from a program's main (aiacc-train, aiacc-bench, aiacc-ps-server),
// never from library code, which must not change its host program's allocator.
bool keep_freed_message_memory();

}  // namespace aiacc::net
