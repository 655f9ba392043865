// Rendezvous wire protocol between RendezvousClient (DEALER) and RendezvousServer (ROUTER),
// internal to core/net. Every request is one frame: u64 sequence, u32 op, op fields; every
// reply one frame: u64 sequence (echoed), u32 status, fields. The server answers at once (it
// never parks a request); clients poll for conditions that are not yet true, which keeps the
// server stateless per connection and lets a timed-out client name what is still missing.
#pragma once

#include <cstdint>

namespace aiacc::net::detail {

enum class RendezvousOp : std::uint32_t {
  kRegister = 1,  // i32 rank, i32 world_size, strings addresses      -> kOk
  kTable = 2,     //                                                  -> kOk + i32 world, u64 n,
                  //   n × (i32 rank, strings addresses): every rank registered so far
  kSet = 3,       // str key, str value                                -> kOk
  kGet = 4,       // str key                                           -> kOk + str value | kNotYet
  kBarrier = 5,   // str name, i32 rank                                -> kOk + u64 n,
                  //   n × i32: the ranks that have arrived so far
  kAbort = 6,     // i32 rank, u32 AbortKind, str message: that rank failed; every later
                  //   request gets kAborted (the first abort wins)                -> kOk
};

enum class RendezvousStatus : std::uint32_t {
  kOk = 0,
  kNotYet = 1,  // the key is not set yet
  kError = 2,   // str message: the job is broken (duplicate rank, world-size disagreement, ...)
  kAborted = 3, // u32 AbortKind, str message "rendezvous: rank R failed: ...": a rank's abort
};

// What kind of error ended the rank that aborted: the others fail with the same kind, so a
// configuration error stays one (launchers do not restart those).
enum class AbortKind : std::uint32_t {
  kRuntime = 0,
  kConfig = 1,
};

}  // namespace aiacc::net::detail
