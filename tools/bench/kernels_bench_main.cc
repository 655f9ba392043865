// aiacc-bench-kernels: CPU kernel micro-benchmarks (Google Benchmark). Each benchmark takes the
// thread count as its last argument, so single-core and all-core figures print side by side.
//   build/tools/aiacc-bench-kernels [--benchmark_filter=Conv]
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
