// run_ranks: runs `world` ranks as threads of this test process (each on loopback), joins all
// of them and rethrows the first exception, so a failing rank fails the test with its message.
// Each rank gets its own ZeroMQ context, as it would as a separate process.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace aiacc::testing {

// Calls fn(rank) for rank in [0, world) concurrently; returns when every call has returned.
// Rethrows the exception of the rank that failed first (in time).
inline void run_ranks(int world, const std::function<void(int rank)>& fn) {
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace aiacc::testing
