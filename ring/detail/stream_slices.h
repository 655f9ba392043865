// Internal to ring/: running one collective on every stream of a communicator, each stream on
// its slice of the buffer, and timing each stream for the StreamBalancer. Shared by the
// multi-stream algorithms (RingAllreduce, HalvingDoublingAllreduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/net/deadline.h"
#include "ring/communicator.h"

namespace aiacc::ring::detail {

// Slices handed to streams are multiples of this many elements (cache lines for f32).
inline constexpr std::int64_t kSliceAlign = 64;

// Runs run_stream(stream, slice) on each of comm's stream threads at once, the `count` elements
// split by the stream weights, and records each stream's bytes and seconds in `timings`.
template <class RunStream>
void run_on_stream_slices(Communicator& comm, std::int64_t count, std::size_t element_bytes,
                          StreamTimings& timings, RunStream&& run_stream) {
  const auto slices = split_weighted(count, comm.stream_weights(), kSliceAlign);
  timings.bytes.assign(slices.size(), 0);
  timings.seconds.assign(slices.size(), 0.0);
  comm.pool().run([&](int stream) {
    const auto s = static_cast<std::size_t>(stream);
    const auto start = net::Clock::now();
    run_stream(stream, slices[s]);
    timings.bytes[s] = slices[s].size() * static_cast<std::int64_t>(element_bytes);
    timings.seconds[s] = net::seconds_since(start);
  });
}

}  // namespace aiacc::ring::detail
