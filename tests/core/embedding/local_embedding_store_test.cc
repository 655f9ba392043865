// LocalEmbeddingStore against a naive reference (an unordered_map of [value | state] rows updated
// by SparseRowOptimizer): deterministic creation, every sparse rule, growth, checkpoints,
// partition independence, edge cases, concurrency and a 1M-row smoke run.
#include "core/embedding/local_embedding_store.h"
#include "core/memory/huge_pages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/util/random.h"
#include "tests/testing/gradient_check.h"

namespace aiacc {
namespace {

using ::testing::HasSubstr;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

EmbeddingTableSpec spec_of(std::int64_t dim, std::uint64_t seed = 7, double init_scale = 0.05) {
  return EmbeddingTableSpec{"deep.C1", dim, init_scale, seed};
}

optim::OptimizerOptions optimizer_of(const std::string& type, double momentum = 0.0) {
  optim::OptimizerOptions o;
  o.type = type;
  o.momentum = momentum;
  o.weight_decay = type == "ftrl" ? 0.0 : 0.01;
  o.initial_accumulator = 0.1;
  o.l1 = 0.001;
  o.l2 = 0.01;
  return o;
}

// The reference store: the rule the interface documents, written as plainly as possible.
class ReferenceStore {
 public:
  ReferenceStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& o)
      : spec_(spec), optimizer_(o), dim_(static_cast<int>(spec.dim)),
        state_(optimizer_.state_floats(dim_)) {}

  std::vector<float>& row(std::int64_t id) {
    auto it = rows_.find(id);
    if (it != rows_.end()) return it->second;
    std::vector<float> fresh(static_cast<std::size_t>(dim_ + state_));
    Rng rng(mix64(static_cast<std::uint64_t>(id) ^ spec_.seed));
    for (int j = 0; j < dim_; ++j) {
      fresh[j] = static_cast<float>(rng.uniform(-spec_.init_scale, spec_.init_scale));
    }
    optimizer_.init_state(fresh.data() + dim_, dim_);
    return rows_.emplace(id, std::move(fresh)).first->second;
  }
  void push(const std::vector<std::int64_t>& ids, const std::vector<float>& grads, double lr) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::vector<float>& r = row(ids[i]);
      optimizer_.update_row(r.data(), r.data() + dim_, grads.data() + i * dim_, dim_, lr);
    }
  }
  const std::unordered_map<std::int64_t, std::vector<float>>& rows() const { return rows_; }

 private:
  EmbeddingTableSpec spec_;
  optim::SparseRowOptimizer optimizer_;
  int dim_;
  int state_;
  std::unordered_map<std::int64_t, std::vector<float>> rows_;
};

std::vector<float> pull(EmbeddingStore& store, const std::vector<std::int64_t>& ids) {
  std::vector<float> rows(ids.size() * static_cast<std::size_t>(store.spec().dim), -99.0f);
  store.pull(ids, rows.data());
  return rows;
}

// Random ids from a small universe (so steps overlap), unique within the request, including
// negative and extreme values.
std::vector<std::int64_t> random_ids(std::size_t count, std::uint64_t universe, Rng& rng) {
  std::vector<std::int64_t> ids;
  while (ids.size() < count) {
    auto id = static_cast<std::int64_t>(mix64(rng.below(universe)));
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

// Compares every row of `store` (values and state, bitwise) with `reference`.
void expect_matches(const LocalEmbeddingStore& store, const ReferenceStore& reference) {
  const NamedTensors saved = store.save_rows();
  ASSERT_EQ(saved.size(), 3u);
  const auto ids = saved[0].second.to_vector<std::int64_t>();
  ASSERT_EQ(ids.size(), reference.rows().size());
  ASSERT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  const int d = static_cast<int>(store.spec().dim);
  const int s = store.state_floats();
  const float* values = saved[1].second.data<float>();
  const float* state = saved[2].second.data<float>();
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const auto& expected = reference.rows().at(ids[r]);
    ASSERT_EQ(std::memcmp(values + r * d, expected.data(), d * sizeof(float)), 0) << "id " << ids[r];
    ASSERT_EQ(std::memcmp(state + r * s, expected.data() + d, s * sizeof(float)), 0) << "id " << ids[r];
  }
}

TEST(LocalEmbeddingStore, PullCreatesDeterministicRowsInAnyOrder) {
  const EmbeddingTableSpec spec = spec_of(5);
  LocalEmbeddingStore a(spec, optimizer_of("sgd"), {.num_partitions = 1});
  LocalEmbeddingStore b(spec, optimizer_of("adagrad"), {.num_partitions = 13});
  const std::vector<std::int64_t> ids = {3, -1, 0, 1ll << 62, -(1ll << 62), 42};
  std::vector<std::int64_t> reversed(ids.rbegin(), ids.rend());
  const std::vector<float> rows_a = pull(a, ids);
  const std::vector<float> rows_b = pull(b, reversed);
  ReferenceStore reference(spec, optimizer_of("sgd"));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float>& expected = reference.row(ids[i]);
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(rows_a[i * 5 + j], expected[j]) << "id " << ids[i];
      EXPECT_EQ(rows_b[(ids.size() - 1 - i) * 5 + j], expected[j]) << "id " << ids[i];
      EXPECT_LE(std::abs(expected[j]), 0.05f);
    }
  }
  // A second pull returns the same rows; another seed gives other rows.
  EXPECT_EQ(pull(a, ids), rows_a);
  LocalEmbeddingStore other_seed(spec_of(5, 8), optimizer_of("sgd"));
  EXPECT_NE(pull(other_seed, ids), rows_a);
  EXPECT_EQ(a.num_rows(), 6);
}

// Read-only (an evaluation's reads): the rows a pull would return, held ones with their trained
// values and missing ones with their initial values, and no row created.
TEST(LocalEmbeddingStore, ReadOnlyPullsCreateNoRows) {
  const EmbeddingTableSpec spec = spec_of(5);
  LocalEmbeddingStore store(spec, optimizer_of("adagrad"), {.num_partitions = 3});
  LocalEmbeddingStore reference(spec, optimizer_of("adagrad"), {.num_partitions = 1});
  const std::vector<std::int64_t> held = {1, 2, 3}, asked = {2, 7, 1, -9};
  const std::vector<float> grads(held.size() * 5, 0.5f);
  for (LocalEmbeddingStore* s : {&store, &reference}) {
    pull(*s, held);
    s->push(held, grads.data(), 0.1);
  }
  store.set_read_only(true);
  const std::vector<float> read = pull(store, asked);
  EXPECT_EQ(store.num_rows(), 3) << "a read-only pull created rows";
  EXPECT_EQ(read, pull(reference, asked));
  store.set_read_only(false);
  pull(store, asked);
  EXPECT_EQ(store.num_rows(), 5);
}

class PushPerRule : public ::testing::TestWithParam<std::pair<std::string, double>> {};

TEST_P(PushPerRule, EqualsSparseRowOptimizerOnReferenceStore) {
  const auto [type, momentum] = GetParam();
  const EmbeddingTableSpec spec = spec_of(6);
  LocalEmbeddingStore store(spec, optimizer_of(type, momentum),
                            {.num_partitions = 5, .min_parallel_floats = 0});
  ReferenceStore reference(spec, optimizer_of(type, momentum));
  Rng rng(11);
  for (int step = 0; step < 20; ++step) {
    // Some ids are pulled first, others are first touched by the push itself.
    const auto ids = random_ids(40, 150, rng);
    if (step % 2 == 0) {
      const std::vector<float> rows = pull(store, ids);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(std::memcmp(rows.data() + i * 6, reference.row(ids[i]).data(), 6 * sizeof(float)), 0);
      }
    }
    const auto grads = testing::random_floats(ids.size() * 6, 100 + step);
    store.push(ids, grads.data(), 0.05);
    reference.push(ids, grads, 0.05);
  }
  expect_matches(store, reference);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, PushPerRule,
    ::testing::Values(std::pair<std::string, double>{"sgd", 0.0}, std::pair<std::string, double>{"sgd", 0.9},
                      std::pair<std::string, double>{"adagrad", 0.0},
                      std::pair<std::string, double>{"adam", 0.0},
                      std::pair<std::string, double>{"adamw", 0.0},
                      std::pair<std::string, double>{"ftrl", 0.0}),
    [](const auto& info) {
      return info.param.first + (info.param.second > 0 ? "_momentum" : "");
    });

TEST(LocalEmbeddingStore, GrowthKeepsContents) {
  const EmbeddingTableSpec spec = spec_of(3);
  // One partition, small blocks: thousands of rows force many rehashes and block allocations
  // (growing blocks of 64..128 rows, then blocks of 256).
  LocalEmbeddingStore store(spec, optimizer_of("adagrad"), {.num_partitions = 1, .rows_per_block = 256});
  ReferenceStore reference(spec, optimizer_of("adagrad"));
  Rng rng(3);
  for (int step = 0; step < 50; ++step) {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(step * 200 + i);  // new ids every step
    const auto grads = testing::random_floats(ids.size() * 3, step);
    store.push(ids, grads.data(), 0.1);
    reference.push(ids, grads, 0.1);
    // Early rows must survive every later rehash.
    const std::vector<std::int64_t> early = {0, 1, 199};
    const std::vector<float> rows = pull(store, early);
    for (std::size_t i = 0; i < early.size(); ++i) {
      ASSERT_EQ(std::memcmp(rows.data() + i * 3, reference.row(early[i]).data(), 3 * sizeof(float)), 0);
    }
  }
  EXPECT_EQ(store.num_rows(), 10000);
  expect_matches(store, reference);
  // The load bound holds: slots are at most 1 / 0.5 of the rows (16 bytes each).
  EXPECT_LE(store.memory_bytes(), store.row_bytes() + 10000 * 32 + 256 * 6 * 4 + 4096);
}

TEST(LocalEmbeddingStore, SmallTablesStaySmall) {
  // A wide table touched by a handful of ids must not cost a full block per partition.
  LocalEmbeddingStore store(spec_of(1), optimizer_of("adagrad"), {.num_partitions = 16});
  const std::vector<float> rows = pull(store, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(store.num_rows(), 10);
  EXPECT_LT(store.memory_bytes(), 16u * (16 * 16 + 64 * 2 * 4 + 64));
}

TEST(LocalEmbeddingStore, SaveLoadRoundTripIsBitwiseAndContinuesIdentically) {
  const EmbeddingTableSpec spec = spec_of(4);
  LocalEmbeddingStore original(spec, optimizer_of("adam"), {.num_partitions = 3});
  Rng rng(5);
  for (int step = 0; step < 10; ++step) {
    const auto ids = random_ids(30, 100, rng);
    const auto grads = testing::random_floats(ids.size() * 4, step);
    original.push(ids, grads.data(), 0.01);
  }
  const NamedTensors saved = original.save_rows();
  EXPECT_EQ(saved[0].first, "deep.C1.ids");
  EXPECT_EQ(saved[1].first, "deep.C1.values");
  EXPECT_EQ(saved[2].first, "deep.C1.state");
  EXPECT_EQ(saved[2].second.shape(), Shape({original.num_rows(), 2 * 4 + 1}));

  LocalEmbeddingStore restored(spec, optimizer_of("adam"), {.num_partitions = 8});
  pull(restored, {123456});  // contents are replaced, not merged
  restored.load_rows(saved);
  EXPECT_EQ(restored.num_rows(), original.num_rows());
  const NamedTensors again = restored.save_rows();
  for (std::size_t t = 0; t < 3; ++t) {
    ASSERT_EQ(again[t].second.shape(), saved[t].second.shape());
    EXPECT_EQ(std::memcmp(again[t].second.raw_data(), saved[t].second.raw_data(),
                          saved[t].second.num_bytes()), 0) << saved[t].first;
  }
  for (int step = 0; step < 5; ++step) {
    const auto ids = random_ids(30, 120, rng);
    const auto grads = testing::random_floats(ids.size() * 4, 50 + step);
    original.push(ids, grads.data(), 0.01);
    restored.push(ids, grads.data(), 0.01);
    EXPECT_EQ(pull(original, ids), pull(restored, ids));
  }
}

TEST(LocalEmbeddingStore, PartitionCountAndThreadsDoNotChangeResults) {
  const EmbeddingTableSpec spec = spec_of(8);
  std::vector<std::unique_ptr<LocalEmbeddingStore>> stores;
  for (int partitions : {1, 7, 64}) {
    stores.push_back(std::make_unique<LocalEmbeddingStore>(
        spec, optimizer_of("adagrad"),
        LocalEmbeddingStoreOptions{.num_partitions = partitions, .min_parallel_floats = 0}));
  }
  Rng rng(9);
  for (int step = 0; step < 10; ++step) {
    const auto ids = random_ids(500, 2000, rng);
    const auto grads = testing::random_floats(ids.size() * 8, step);
    for (auto& store : stores) store->push(ids, grads.data(), 0.1);
  }
  const NamedTensors first = stores[0]->save_rows();
  for (std::size_t s = 1; s < stores.size(); ++s) {
    const NamedTensors other = stores[s]->save_rows();
    for (std::size_t t = 0; t < 3; ++t) {
      ASSERT_EQ(other[t].second.shape(), first[t].second.shape());
      EXPECT_EQ(std::memcmp(other[t].second.raw_data(), first[t].second.raw_data(),
                            first[t].second.num_bytes()), 0);
    }
  }
}

// One thread takes every request in request order over all partitions; several threads take
// large requests partition by partition. Both must leave bitwise the same rows, duplicates
// included (a duplicate's updates apply in request order either way).
TEST(LocalEmbeddingStore, OneThreadAndSeveralThreadsGiveTheSameRows) {
  const EmbeddingTableSpec spec = spec_of(16);
  struct Run {
    int threads;
    std::int64_t min_parallel_floats;
  };
  std::vector<NamedTensors> results;
  std::vector<std::vector<float>> pulled;
  // Puts the thread count back however the test ends.
  struct RestoreThreads {
    int threads = omp_get_max_threads();
    ~RestoreThreads() { omp_set_num_threads(threads); }
  } restore;
  for (const Run run : {Run{1, 0}, Run{2, 0}, Run{2, std::int64_t{1} << 40}}) {
    omp_set_num_threads(run.threads);
    LocalEmbeddingStore store(spec, optimizer_of("adam"),
                              {.num_partitions = 16, .min_parallel_floats = run.min_parallel_floats});
    Rng rng(21);
    for (int step = 0; step < 6; ++step) {
      // Small (fewer positions than the prefetch distance) and large requests, with duplicates.
      auto ids = random_ids(step % 2 == 0 ? 20 : 3000, 20000, rng);
      ids.insert(ids.end(), ids.begin(), ids.begin() + 7);
      const auto grads = testing::random_floats(ids.size() * 16, step);
      store.push(ids, grads.data(), 0.01);
    }
    results.push_back(store.save_rows());
    pulled.push_back(pull(store, random_ids(500, 20000, rng)));
  }
  for (std::size_t r = 1; r < results.size(); ++r) {
    for (std::size_t t = 0; t < 3; ++t) {
      ASSERT_EQ(results[r][t].second.shape(), results[0][t].second.shape()) << "run " << r;
      EXPECT_EQ(std::memcmp(results[r][t].second.raw_data(), results[0][t].second.raw_data(),
                            results[0][t].second.num_bytes()), 0) << "run " << r << ", tensor " << t;
    }
    EXPECT_EQ(pulled[r], pulled[0]) << "run " << r;
  }
}

TEST(LocalEmbeddingStore, DuplicateIdsApplyInRequestOrder) {
  const EmbeddingTableSpec spec = spec_of(2);
  LocalEmbeddingStore batched(spec, optimizer_of("adagrad"));
  LocalEmbeddingStore one_by_one(spec, optimizer_of("adagrad"));
  const std::vector<float> grads = {1.0f, -2.0f, 0.5f, 0.25f};
  batched.push(std::vector<std::int64_t>{9, 9}, grads.data(), 0.1);
  one_by_one.push(std::vector<std::int64_t>{9}, grads.data(), 0.1);
  one_by_one.push(std::vector<std::int64_t>{9}, grads.data() + 2, 0.1);
  EXPECT_EQ(pull(batched, {9}), pull(one_by_one, {9}));
  const std::vector<float> twice = pull(batched, {9, 9});
  EXPECT_EQ(twice[0], twice[2]);
  EXPECT_EQ(twice[1], twice[3]);
  EXPECT_EQ(batched.num_rows(), 1);
}

TEST(LocalEmbeddingStore, EmptyRequestsAndEmptyCheckpoints) {
  LocalEmbeddingStore store(spec_of(4), optimizer_of("sgd"));
  store.pull({}, nullptr);
  store.push({}, nullptr, 0.1);
  EXPECT_EQ(store.num_rows(), 0);
  const NamedTensors saved = store.save_rows();
  EXPECT_EQ(saved[0].second.shape(), Shape({0}));
  EXPECT_EQ(saved[1].second.shape(), Shape({0, 4}));
  EXPECT_EQ(saved[2].second.shape(), Shape({0, 0}));
  pull(store, {1, 2});
  store.load_rows(saved);
  EXPECT_EQ(store.num_rows(), 0);
}

TEST(LocalEmbeddingStore, IdsThatAllLandInOnePartition) {
  const EmbeddingTableSpec spec = spec_of(4);
  std::vector<std::int64_t> ids;
  for (std::int64_t id = 0; ids.size() < 3000; ++id) {
    if (LocalEmbeddingStore::partition_of(id, 8) == 3) ids.push_back(id);
  }
  LocalEmbeddingStore store(spec, optimizer_of("adam"), {.num_partitions = 8, .min_parallel_floats = 0});
  ReferenceStore reference(spec, optimizer_of("adam"));
  const auto grads = testing::random_floats(ids.size() * 4, 1);
  for (int step = 0; step < 3; ++step) {
    store.push(ids, grads.data(), 0.01);
    reference.push(ids, grads, 0.01);
  }
  expect_matches(store, reference);
}

TEST(LocalEmbeddingStore, ConcurrentRequestsFromSeveralThreads) {
  const EmbeddingTableSpec spec = spec_of(4);
  LocalEmbeddingStore store(spec, optimizer_of("sgd"), {.num_partitions = 4, .min_parallel_floats = 0});
  ReferenceStore reference(spec, optimizer_of("sgd"));
  // Each thread owns its ids (so the result is order-free) but all share the partitions.
  constexpr int kThreads = 4;
  std::vector<std::vector<std::int64_t>> ids(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 300; ++i) ids[t].push_back(t * 1000 + i);
  }
  const auto grads = testing::random_floats(300 * 4, 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int step = 0; step < 20; ++step) {
        store.push(ids[t], grads.data(), 0.1);
        pull(store, ids[(t + 1) % kThreads]);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int step = 0; step < 20; ++step) reference.push(ids[t], grads, 0.1);
  }
  expect_matches(store, reference);
}

TEST(LocalEmbeddingStore, RejectsBadSpecsAndBadCheckpoints) {
  EXPECT_THROW(LocalEmbeddingStore(spec_of(0), optimizer_of("sgd")), ConfigError);
  EXPECT_THROW(LocalEmbeddingStore(spec_of(4), optimizer_of("lamb")), ConfigError);
  EXPECT_THROW(LocalEmbeddingStore(spec_of(4), optimizer_of("sgd"), {.num_partitions = 0}), ConfigError);
  EXPECT_THROW(LocalEmbeddingStore(spec_of(4), optimizer_of("sgd"), {.rows_per_block = 3}), ConfigError);

  LocalEmbeddingStore source(spec_of(4), optimizer_of("sgd"));
  pull(source, {1, 2, 3});
  const NamedTensors saved = source.save_rows();

  LocalEmbeddingStore other_dim(spec_of(5), optimizer_of("sgd"));
  pull(other_dim, {7});
  try {
    other_dim.load_rows(saved);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep.C1.values"));
    EXPECT_THAT(e.what(), HasSubstr("[3, 5]"));
  }
  EXPECT_EQ(other_dim.num_rows(), 1);  // unchanged

  LocalEmbeddingStore other_rule(spec_of(4), optimizer_of("adagrad"));
  EXPECT_THROW(other_rule.load_rows(saved), DataError);  // state [3, 0] vs [3, 4]
  EXPECT_THROW(other_rule.load_rows({saved[0], saved[1]}), DataError);  // missing state

  NamedTensors duplicated = saved;
  duplicated[0].second = saved[0].second.clone();
  duplicated[0].second.data<std::int64_t>()[2] = duplicated[0].second.data<std::int64_t>()[0];
  LocalEmbeddingStore target(spec_of(4), optimizer_of("sgd"));
  try {
    target.load_rows(duplicated);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("twice"));
  }
  EXPECT_EQ(target.num_rows(), 0);
}

// A thread keeps its request arrays between requests: sizes that shrink and grow again, and one
// above the kept limit (arrays of its own), each checked against the reference store and
// against rows pulled one id at a time.
// One partition keeps every request on the one-thread path.
TEST(LocalEmbeddingStore, RequestsOfChangingSizesMatchTheReference) {
  for (int partitions : {1, LocalEmbeddingStoreOptions{}.num_partitions}) {
    LocalEmbeddingStoreOptions options;
    options.num_partitions = partitions;
    LocalEmbeddingStore store(spec_of(2), optimizer_of("adagrad"), options);
    ReferenceStore reference(spec_of(2), optimizer_of("adagrad"));
    Rng rng(11);
    for (std::size_t count : {std::size_t{5000}, std::size_t{7}, std::size_t{1200}, std::size_t{9000}, std::size_t{1},
                              (std::size_t{1} << 20) + 3, std::size_t{300}}) {
      std::vector<std::int64_t> ids(count);
      for (std::size_t i = 0; i < count; ++i) ids[i] = static_cast<std::int64_t>(mix64(rng.below(count < 100000 ? 20000 : 1u << 30)));
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      const auto grads = testing::random_floats(ids.size() * 2, static_cast<std::uint64_t>(count));
      store.push(ids, grads.data(), 0.1);
      reference.push(ids, grads, 0.1);
      const std::vector<float> rows = pull(store, ids);
      for (std::size_t i = 0; i < ids.size(); i += 97) {
        ASSERT_EQ(pull(store, {ids[i]}), std::vector<float>(rows.begin() + static_cast<std::ptrdiff_t>(2 * i),
                                                            rows.begin() + static_cast<std::ptrdiff_t>(2 * i + 2)))
            << partitions << " partition(s), request of " << count << ", position " << i;
      }
    }
    expect_matches(store, reference);
  }
}

TEST(LocalEmbeddingStore, MillionRowsSmoke) {
  constexpr std::int64_t kRows = 1'000'000;
  constexpr std::int64_t kBatch = 65'536;
  LocalEmbeddingStore store(spec_of(16), optimizer_of("adagrad"));
  std::vector<std::int64_t> ids(kBatch);
  std::vector<float> rows(kBatch * 16);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (std::int64_t begin = 0; begin < kRows; begin += kBatch) {
    const std::int64_t count = std::min(kBatch, kRows - begin);
    for (std::int64_t i = 0; i < count; ++i) ids[i] = static_cast<std::int64_t>(mix64(begin + i));
    store.pull(std::span(ids.data(), count), rows.data());
  }
  const auto t1 = Clock::now();
  // Pushes to existing rows, in the same batches.
  const auto grads = testing::random_floats(kBatch * 16, 1);
  for (std::int64_t begin = 0; begin < kRows; begin += kBatch) {
    const std::int64_t count = std::min(kBatch, kRows - begin);
    for (std::int64_t i = 0; i < count; ++i) ids[i] = static_cast<std::int64_t>(mix64(begin + i));
    store.push(std::span(ids.data(), count), grads.data(), 0.1);
  }
  const auto t2 = Clock::now();
  ASSERT_EQ(store.num_rows(), kRows);
  const double create_s = std::chrono::duration<double>(t1 - t0).count();
  const double push_s = std::chrono::duration<double>(t2 - t1).count();
  const double bytes_per_row = static_cast<double>(store.memory_bytes()) / kRows;
  const double raw_per_row = static_cast<double>(store.row_bytes()) / kRows;
  std::printf("[ store    ] 1M rows dim 16 adagrad: %.1f bytes/row (raw %.0f, overhead %.1f%%); "
              "create-pull %.2f Mrows/s, push %.2f Mrows/s\n",
              bytes_per_row, raw_per_row, 100.0 * (bytes_per_row / raw_per_row - 1.0),
              kRows / create_s / 1e6, kRows / push_s / 1e6);
  // Slots at load >= 0.5 (<= 32 bytes per row) plus, per partition, the untouched part of the
  // last block's last resident page (a huge page at most).
  EXPECT_LE(bytes_per_row, raw_per_row + 32.0 + 16.0 * static_cast<double>(memory::kHugePageBytes) / kRows);
}

}  // namespace
}  // namespace aiacc
