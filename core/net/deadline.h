// Deadlines for blocking network operations. Every wait in core/net takes an absolute Deadline
// (steady clock, immune to wall-clock jumps) instead of a relative timeout, so a sequence of
// operations shares one budget and nothing can wait without bound.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace aiacc::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The deadline `seconds` from now (fractions allowed; negative values mean "already expired").
inline Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// Milliseconds left until `deadline`, rounded up (so a 0.4 ms remainder still polls once),
// clamped to [0, cap_ms]. Suitable as a zmq_poll timeout.
inline long remaining_ms(Deadline deadline, long cap_ms = 1000 * 60 * 60) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<long>(std::min<std::int64_t>(ms, cap_ms));
}

// Seconds elapsed since `start`, for "waited 2.00 s" in error messages.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace aiacc::net
