// Sparse kernel benchmarks: embedding-bag forward and backward over a CTR-like batch (F fields,
// each one embedding-bag call), and id de-duplication. Ids are drawn log-uniformly from a
// hashed vocabulary of 10^6, so a few hot ids repeat a lot and the tail is mostly unique, as
// with hashed Criteo features. The last argument of these benchmarks is the OpenMP thread count;
// each is registered for 1 thread and for all cores.
//   row_bytes: bytes of rows moved per second (forward: P rows read + N written; backward:
//              P gradient rows read + U written), unique: mean unique rows per field.
// Then the embedding store's per-row path (LocalEmbeddingStore pull and push with adagrad, one
// thread) on the request sizes a worker's replicated table or a parameter-server shard sees;
// StorePushCold evicts the caches before each push, as a training step's dense work does.
//   aiacc-bench-kernels --benchmark_filter='EmbeddingBag|Dedup|Store'
#include <benchmark/benchmark.h>

#include "tools/bench/bench_threads.h"
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/embedding/local_embedding_store.h"
#include "core/kernels/dedup.h"
#include "core/kernels/embedding_bag.h"
#include "core/util/random.h"

namespace {

using aiacc::bench::add_thread_counts;
using aiacc::kernels::BagMode;
using aiacc::kernels::EmbeddingBagGeometry;

constexpr double kVocabulary = 1e6;

// One categorical field of a batch: its ids in CSR form, de-duplicated, with buffers.
struct Field {
  std::vector<std::int64_t> ids, offsets;
  aiacc::kernels::DedupResult dedup;
  EmbeddingBagGeometry geometry;
  std::vector<float> unique_rows, out, grad_out, grad_rows;
};

// Args: batch N, ids per bag, fields F, dim D, threads.
std::vector<Field> make_fields(const benchmark::State& state) {
  const std::int64_t batch = state.range(0), per_bag = state.range(1), dim = state.range(3);
  std::vector<Field> fields(static_cast<std::size_t>(state.range(2)));
  for (std::size_t f = 0; f < fields.size(); ++f) {
    Field& field = fields[f];
    aiacc::Rng rng(f + 1);
    for (std::int64_t i = 0; i <= batch; ++i) field.offsets.push_back(i * per_bag);
    for (std::int64_t p = 0; p < batch * per_bag; ++p) {
      // Log-uniform over [1, V]: the hot head repeats within a batch, the tail rarely does.
      const auto rank = static_cast<std::int64_t>(std::exp(rng.uniform() * std::log(kVocabulary)));
      field.ids.push_back(static_cast<std::int64_t>(aiacc::mix64(rank + 1000003 * f)));
    }
    field.dedup = aiacc::kernels::deduplicate_ids(field.ids);
    const auto unique = static_cast<std::int64_t>(field.dedup.unique_ids.size());
    field.geometry = {batch, batch * per_bag, unique, dim};
    field.unique_rows.assign(static_cast<std::size_t>(unique * dim), 0.5f);
    field.out.resize(static_cast<std::size_t>(batch * dim));
    field.grad_out.assign(static_cast<std::size_t>(batch * dim), 0.25f);
    field.grad_rows.resize(static_cast<std::size_t>(unique * dim));
  }
  return fields;
}

double mean_unique(const std::vector<Field>& fields) {
  double total = 0;
  for (const Field& f : fields) total += static_cast<double>(f.geometry.num_unique);
  return total / static_cast<double>(fields.size());
}


// Batch 512 with 26 one-hot fields (Criteo) and 26 multi-hot fields of 20 ids, dim 16 and 64.
void ctr_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "ids", "F", "D", "threads"});
  add_thread_counts(b, {{512, 1, 26, 16}, {512, 1, 26, 64}, {512, 20, 26, 16}, {512, 20, 26, 64}}, benchmark::kMicrosecond);
}

void BM_EmbeddingBagForward(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(4)));
  auto fields = make_fields(state);
  double bytes = 0;
  for (const Field& f : fields) {
    bytes += static_cast<double>((f.geometry.num_positions + f.geometry.batch) * f.geometry.dim) *
             sizeof(float);
  }
  for (auto _ : state) {
    for (Field& f : fields) {
      aiacc::kernels::embedding_bag_forward<float>(f.geometry, BagMode::sum, f.unique_rows.data(),
                                                   f.dedup.inverse.data(), f.offsets.data(),
                                                   f.out.data());
      benchmark::DoNotOptimize(f.out.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["row_bytes"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["unique"] = mean_unique(fields);
}
BENCHMARK(BM_EmbeddingBagForward)->Apply(ctr_shapes);

void BM_EmbeddingBagBackward(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(4)));
  auto fields = make_fields(state);
  double bytes = 0;
  for (const Field& f : fields) {
    bytes +=
        static_cast<double>((f.geometry.num_positions + f.geometry.num_unique) * f.geometry.dim) *
        sizeof(float);
  }
  for (auto _ : state) {
    for (Field& f : fields) {
      aiacc::kernels::embedding_bag_backward<float>(f.geometry, BagMode::sum, f.grad_out.data(),
                                                    f.dedup.inverse.data(), f.offsets.data(),
                                                    f.grad_rows.data());
      benchmark::DoNotOptimize(f.grad_rows.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["row_bytes"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["unique"] = mean_unique(fields);
}
BENCHMARK(BM_EmbeddingBagBackward)->Apply(ctr_shapes);

// De-duplication of every field of a batch; fields are independent, so threads take whole
// fields, each with its own reusable IdDeduplicator (as a parameter-server client would).
void BM_Dedup(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(4));
  omp_set_num_threads(threads);
  auto fields = make_fields(state);
  std::vector<aiacc::kernels::IdDeduplicator> deduplicators(fields.size());
  double ids = 0;
  for (const Field& f : fields) ids += static_cast<double>(f.ids.size());
  const auto num_fields = static_cast<std::int64_t>(fields.size());
  for (auto _ : state) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t f = 0; f < num_fields; ++f) {
      deduplicators[f].run(fields[f].ids, fields[f].dedup);
    }
    benchmark::ClobberMemory();
  }
  state.counters["ids"] = benchmark::Counter(ids, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["unique"] = mean_unique(fields);
}
BENCHMARK(BM_Dedup)->ArgNames({"N", "ids", "F", "D", "threads"})->Apply([](auto* b) {
  add_thread_counts(b, {{512, 1, 26, 0}, {512, 20, 26, 0}, {8192, 20, 26, 0}, {131072, 1, 1, 0}}, benchmark::kMicrosecond);
});

// A table of R rows (all created up front) and requests of U distinct ids drawn from it.
// Args: rows R, ids per request U, dim D, partitions P.
struct StoreFixture {
  aiacc::LocalEmbeddingStore store;
  std::vector<std::vector<std::int64_t>> requests;
  std::vector<float> rows;

  static aiacc::optim::OptimizerOptions adagrad() {
    aiacc::optim::OptimizerOptions o;
    o.type = "adagrad";
    o.lr = 0.05;
    return o;
  }
  static aiacc::LocalEmbeddingStoreOptions options(const benchmark::State& state) {
    aiacc::LocalEmbeddingStoreOptions o;
    o.num_partitions = static_cast<int>(state.range(3));
    return o;
  }
  explicit StoreFixture(const benchmark::State& state)
      : store({"bench", state.range(2), 0.05, 1}, adagrad(), options(state)) {
    const std::int64_t table_rows = state.range(0), unique = state.range(1), dim = state.range(2);
    std::vector<std::int64_t> all(static_cast<std::size_t>(table_rows));
    for (std::int64_t i = 0; i < table_rows; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(aiacc::mix64(static_cast<std::uint64_t>(i)) >> 1);
    rows.resize(static_cast<std::size_t>(std::max(table_rows, unique) * dim), 0.01f);
    store.pull(all, rows.data());
    aiacc::Rng rng(7, 0);
    for (int r = 0; r < 16; ++r) {
      // A partial Fisher-Yates shuffle: U distinct ids of the table.
      for (std::int64_t i = 0; i < unique; ++i) {
        const auto j = i + static_cast<std::int64_t>(rng.uniform(0.0, 1.0) * static_cast<double>(table_rows - i));
        std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(std::min(j, table_rows - 1))]);
      }
      requests.emplace_back(all.begin(), all.begin() + unique);
    }
  }
};

// Times pull or push of the fixture's requests in turn; `cold` evicts the caches (untimed)
// before each call.
enum class StoreOp { pull, push };
void run_store(benchmark::State& state, StoreOp op, bool cold) {
  omp_set_num_threads(1);
  StoreFixture f(state);
  std::vector<float> evict(cold ? std::size_t{4} << 20 : 0, 1.0f);
  std::size_t r = 0;
  float sink = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      for (std::size_t i = 0; i < evict.size(); i += 16) { evict[i] += 1.0f; sink += evict[i]; }
      state.ResumeTiming();
    }
    const auto& ids = f.requests[r++ % f.requests.size()];
    if (op == StoreOp::pull) {
      f.store.pull(ids, f.rows.data());
    } else {
      f.store.push(ids, f.rows.data(), 0.05);
    }
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(sink);
  state.counters["rows"] = benchmark::Counter(static_cast<double>(state.range(1)), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_StorePull(benchmark::State& state) { run_store(state, StoreOp::pull, false); }
void BM_StorePush(benchmark::State& state) { run_store(state, StoreOp::push, false); }
void BM_StorePushCold(benchmark::State& state) { run_store(state, StoreOp::push, true); }
// The flights tables (3387 rows; ~800 touched a step at batch 1024, ~440 a step in the merged
// update of two workers at batch 256, dims 1 and 16) and a shard's large requests of small rows.
const auto store_shapes = [](auto* b) {
  b->ArgNames({"R", "U", "D", "P"})->Unit(benchmark::kMicrosecond);
  for (const auto& [r, u, d, p] : std::vector<std::array<std::int64_t, 4>>{
           {3387, 800, 1, 1}, {3387, 800, 16, 1}, {3387, 444, 1, 1}, {3387, 444, 16, 1}, {3387, 105, 16, 1},
           {200000, 50000, 8, 16}, {200000, 50000, 16, 16}, {200000, 50000, 8, 1}, {200000, 50000, 16, 1},
           {2000000, 100000, 8, 16}, {2000000, 100000, 8, 1}}) {
    b->Args({r, u, d, p});
  }
};
BENCHMARK(BM_StorePull)->Apply(store_shapes);
BENCHMARK(BM_StorePush)->Apply(store_shapes);
BENCHMARK(BM_StorePushCold)->Apply(store_shapes);

}  // namespace
