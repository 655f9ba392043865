// Process-wide malloc settings for programs that move large ZeroMQ messages.
//
// ZeroMQ mallocs the body of every received message and the application frees it after use,
// often on another thread. Under glibc's defaults a body above the (adaptive) mmap threshold is
// a fresh mapping, and a freed heap top above the trim threshold goes back to the kernel, so the
// next message of the same size faults its pages in again. On a 4-rank loopback allreduce of
// 1 MiB that was more than half the time (3.2 ms -> 1.2-1.8 ms with the memory kept).
// Collectives and parameter-server exchanges move the same sizes every step, so keeping the
// memory for reuse costs little: at most the trim threshold of free heap per malloc arena.
#pragma once

namespace aiacc::net {

// Serves blocks up to 32 MiB (glibc's largest mmap threshold) from the heap and keeps up to
// 512 MiB of free heap top mapped. Leaves malloc alone where the user's environment sets either
// threshold (GLIBC_TUNABLES with glibc.malloc.*, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_),
// and does nothing outside glibc. Returns whether it changed the settings.
//
// Process-wide: call it once from a program's main (aiacc-train, aiacc-bench, aiacc-ps-server),
// never from library code, which must not change its host program's allocator.
bool keep_freed_message_memory();

}  // namespace aiacc::net
