// Internal to core/optim: fixed-size chunking of element-wise optimiser loops, run in parallel
// with OpenMP. Chunk boundaries depend only on the element count, never on the thread count, so
// results (including layer norms summed chunk by chunk) are identical on every rank and machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "core/util/parallel_for.h"

namespace aiacc::optim::detail {

// 32 Ki floats (128 KiB): large enough to amortise the OpenMP fork, small enough to spread a
// typical conv or linear weight over several threads.
inline constexpr std::int64_t kChunkElements = std::int64_t{1} << 15;

inline std::int64_t num_chunks(std::int64_t count) {
  return (count + kChunkElements - 1) / kChunkElements;
}

// Calls body(chunk, begin, end) for each chunk of [0, count); chunks run in parallel when there
// is more than one. `body` must not throw (exceptions cannot leave an OpenMP region).
template <class Body>
void for_each_chunk(std::int64_t count, Body&& body) {
  const std::int64_t chunks = num_chunks(count);
  util::parallel_for(std::int64_t{0}, chunks, chunks > 1, [&](std::int64_t c) {
    const std::int64_t begin = c * kChunkElements;
    body(c, begin, std::min(count, begin + kChunkElements));
  });
}

// [begin, end) of `s`, or an empty span when `s` is empty (an absent state plane).
template <class T>
std::span<T> slice(std::span<T> s, std::int64_t begin, std::int64_t end) {
  if (s.empty()) return s;
  return s.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin));
}

}  // namespace aiacc::optim::detail
