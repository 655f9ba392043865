// Dropout kernels (see dropout.h). The mask is drawn per fixed-size chunk, each chunk with its
// own Rng stream, so any number of threads reproduces the same mask.
#include "core/kernels/dropout.h"

#include <algorithm>

#include "core/check.h"
#include "core/util/parallel_for.h"
#include "core/util/random.h"

namespace aiacc::kernels {
namespace {

// Below this many elements the OpenMP fork/join costs more than it saves.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 16;

}  // namespace

void dropout_mask(std::int64_t count, double p, std::uint64_t seed, std::uint64_t step,
                  std::uint8_t* mask) {
  AIACC_CHECK(p >= 0.0 && p <= 1.0, "dropout probability {} outside [0, 1]", p);
  AIACC_CHECK_GE(count, 0, "dropout element count");
  const std::uint64_t stream_seed = seed ^ mix64(step);
  const std::int64_t num_chunks = (count + kDropoutChunk - 1) / kDropoutChunk;
  util::parallel_for(std::int64_t{0}, num_chunks, count >= kMinParallelElements, [&](std::int64_t chunk) {
    Rng rng(stream_seed, static_cast<std::uint64_t>(chunk));
    const std::int64_t end = std::min(count, (chunk + 1) * kDropoutChunk);
    // uniform() >= p keeps with probability 1 - p; p == 0 keeps all, p == 1 drops all.
    for (std::int64_t e = chunk * kDropoutChunk; e < end; ++e) mask[e] = rng.uniform() >= p;
  });
}

template <class T>
void dropout_apply(std::int64_t count, const T* x, const std::uint8_t* mask, double p, T* y) {
  AIACC_CHECK(p >= 0.0 && p <= 1.0, "dropout probability {} outside [0, 1]", p);
  const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  util::parallel_for(std::int64_t{0}, count, count >= kMinParallelElements,
                     [=](std::int64_t e) { y[e] = mask[e] ? x[e] * scale : T(0); });
}

template void dropout_apply<float>(std::int64_t, const float*, const std::uint8_t*, double, float*);
template void dropout_apply<double>(std::int64_t, const double*, const std::uint8_t*, double,
                                    double*);

}  // namespace aiacc::kernels
