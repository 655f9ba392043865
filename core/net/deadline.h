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

// Longest wait a duration in seconds stands for: a billion seconds (31 years). Timeouts are
// configured in seconds as doubles, and the clock counts 64-bit nanoseconds: 1e10 s would
// overflow it and turn "wait practically forever" into a deadline in the past.
inline constexpr double kMaxWaitSeconds = 1e9;

// `seconds` (fractions allowed) as a clock duration, clamped to [0, kMaxWaitSeconds].
inline Clock::duration duration_from_seconds(double seconds) {
  const double clamped = seconds > 0 ? std::min(seconds, kMaxWaitSeconds) : 0.0;  // NaN: 0
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(clamped));
}

// The deadline `seconds` from now (fractions allowed; zero or negative means "already expired";
// anything beyond kMaxWaitSeconds waits that long).
inline Deadline deadline_after(double seconds) { return Clock::now() + duration_from_seconds(seconds); }

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
