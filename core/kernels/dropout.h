// Inverted dropout on raw pointers: a reproducible keep-mask drawn from aiacc::Rng seeded with
// (seed, step), and one masked scaling used for both forward and backward.
// Legend: E = number of elements (any shape, flattened).
#pragma once

#include <cstdint>

namespace aiacc::kernels {

// mask[E] = 1 (keep, probability 1 - p) or 0 (drop), for p in [0, 1]. Deterministic in
// (seed, step) and independent of the thread count: element e draws from
// Rng(seed ^ mix64(step), e / kDropoutChunk), so chunks can be filled in parallel.
inline constexpr std::int64_t kDropoutChunk = 4096;
void dropout_mask(std::int64_t count, double p, std::uint64_t seed, std::uint64_t step,
                  std::uint8_t* mask);

// y[E] = x * mask / (1 - p); all zeros when p == 1 (nothing is kept). Being linear, this is
// also the backward: dx = dropout_apply(dy, same mask, p). May run in place (y == x).
template <class T>
void dropout_apply(std::int64_t count, const T* x, const std::uint8_t* mask, double p, T* y);

}  // namespace aiacc::kernels
