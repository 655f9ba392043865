// Helpers shared by the kernel benchmarks: every benchmark takes its OpenMP thread count as the
// last argument, registered once for 1 thread and once for every core, side by side.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <vector>

namespace aiacc::bench {

// Sets the OpenMP thread count from argument `index` of `state`.
inline void set_threads(const benchmark::State& state, int index) {
  omp_set_num_threads(static_cast<int>(state.range(index)));
}

// Registers each shape twice: with 1 thread and with every core.
inline void add_thread_counts(benchmark::internal::Benchmark* b,
                              const std::vector<std::vector<std::int64_t>>& shapes,
                              benchmark::TimeUnit unit) {
  for (const auto& shape : shapes) {
    for (const int threads : {1, omp_get_num_procs()}) {
      std::vector<std::int64_t> args = shape;
      args.push_back(threads);
      b->Args(args);
    }
  }
  b->UseRealTime()->Unit(unit);
}

}  // namespace aiacc::bench
