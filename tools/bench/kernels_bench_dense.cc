// Dense kernel benchmarks: GEMM (linear), conv2d forward, backward-data and backward-weight on
// ResNet-like shapes, in float. Every benchmark's last argument is the OpenMP thread count; each
// is registered for 1 thread and for all cores, and reports GFLOP/s as "FLOPS" (2 per MAC).
//   aiacc-bench-kernels --benchmark_filter='Gemm|Conv2d'
#include <benchmark/benchmark.h>

#include "tools/bench/bench_threads.h"
#include <omp.h>

#include <cstdint>
#include <vector>

#include "core/kernels/conv2d.h"
#include "core/kernels/gemm.h"
#include "core/util/random.h"

namespace {

using aiacc::bench::add_thread_counts;
using aiacc::bench::set_threads;
using aiacc::kernels::Conv2dGeometry;
using aiacc::kernels::Trans;

std::vector<float> random_floats(std::int64_t count, std::uint64_t seed) {
  aiacc::Rng rng(seed);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& v : values) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  return values;
}



// ---- GEMM: C[M, N] = A[M, K] * B[K, N] ----
void BM_Gemm(benchmark::State& state) {
  set_threads(state, 3);
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto a = random_floats(m * k, 1), b = random_floats(k * n, 2);
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    aiacc::kernels::gemm<float>(Trans::no, Trans::no, m, n, k, 1.0f, a.data(), b.data(), 0.0f,
                                c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Gemm)->ArgNames({"M", "N", "K", "threads"})->Apply([](auto* b) {
  // Square products, and one image of a 64->64 3x3 conv on 28x28 as a GEMM (O x P x C*9).
  add_thread_counts(b, {{512, 512, 512}, {1024, 1024, 1024}, {64, 784, 576}}, benchmark::kMillisecond);
});

// ---- Conv2d: args N, C, H, W, O, kernel, stride, padding, threads ----
Conv2dGeometry conv_geometry(const benchmark::State& state) {
  Conv2dGeometry g;
  g.batch = state.range(0);
  g.in_channels = state.range(1);
  g.height = state.range(2);
  g.width = state.range(3);
  g.out_channels = state.range(4);
  g.kernel_h = g.kernel_w = state.range(5);
  g.stride_h = g.stride_w = state.range(6);
  g.pad_h = g.pad_w = state.range(7);
  return g;
}

double conv_flops(const Conv2dGeometry& g) {
  return 2.0 * g.batch * g.out_channels * g.out_height() * g.out_width() * g.in_channels *
         g.kernel_h * g.kernel_w;
}

void conv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "C", "H", "W", "O", "k", "s", "p", "threads"});
  add_thread_counts(b, {
                           {128, 64, 28, 28, 64, 3, 1, 1},   // ResNet stage on 28x28
                           {128, 3, 32, 32, 64, 3, 1, 1},    // CIFAR stem
                           {128, 64, 28, 28, 128, 3, 2, 1},  // downsampling 3x3, stride 2
                           {128, 64, 28, 28, 256, 1, 1, 0},  // pointwise expansion (no im2col)
                           {1, 64, 28, 28, 64, 3, 1, 1},     // batch 1 (GEMM-parallel plan)
                           // ResNet-20 on Fashion-MNIST (configs/resnet_fashion_mnist.yaml):
                           {128, 16, 28, 28, 16, 3, 1, 1},   // stage 1
                           {128, 32, 14, 14, 32, 3, 1, 1},   // stage 2
                           {128, 64, 7, 7, 64, 3, 1, 1},     // stage 3
                           {128, 16, 28, 28, 32, 3, 2, 1},   // into stage 2, stride 2
                       }, benchmark::kMillisecond);
}

void BM_Conv2dForward(benchmark::State& state) {
  set_threads(state, 8);
  const Conv2dGeometry g = conv_geometry(state);
  const auto x = random_floats(g.input_numel(), 1), w = random_floats(g.weight_numel(), 2);
  const auto b = random_floats(g.out_channels, 3);
  std::vector<float> y(static_cast<std::size_t>(g.output_numel()));
  for (auto _ : state) {
    aiacc::kernels::conv2d_forward<float>(g, x.data(), w.data(), b.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(conv_flops(g), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Conv2dForward)->Apply(conv_shapes);

void BM_Conv2dBackwardData(benchmark::State& state) {
  set_threads(state, 8);
  const Conv2dGeometry g = conv_geometry(state);
  const auto w = random_floats(g.weight_numel(), 2), dy = random_floats(g.output_numel(), 4);
  std::vector<float> dx(static_cast<std::size_t>(g.input_numel()));
  for (auto _ : state) {
    aiacc::kernels::conv2d_backward_data<float>(g, w.data(), dy.data(), dx.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(conv_flops(g), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Conv2dBackwardData)->Apply(conv_shapes);

void BM_Conv2dBackwardWeight(benchmark::State& state) {
  set_threads(state, 8);
  const Conv2dGeometry g = conv_geometry(state);
  const auto x = random_floats(g.input_numel(), 1), dy = random_floats(g.output_numel(), 4);
  std::vector<float> dw(static_cast<std::size_t>(g.weight_numel())), db(g.out_channels);
  for (auto _ : state) {
    // The weight gradient and the bias gradient always come together in a training step.
    aiacc::kernels::conv2d_backward_weight<float>(g, x.data(), dy.data(), dw.data());
    aiacc::kernels::conv2d_backward_bias<float>(g, dy.data(), db.data());
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(conv_flops(g), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Conv2dBackwardWeight)->Apply(conv_shapes);

}  // namespace
