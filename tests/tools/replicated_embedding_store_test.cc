// ReplicatedEmbeddingStore against a single LocalEmbeddingStore that is given each step's
// averaged gradient: workers as threads of this process, each with its own ProcessGroup on
// loopback. Rows reach the merge by id on their first update and by their dense index after it;
// either way every replica must equal the reference bit for bit, over steps that mix known,
// new and repeated ids, and after a checkpoint's rows are loaded (which renumbers the rows).
// Pulls read numbered rows by index and must return the reference's values; a push of the ids
// just pulled takes the pull's indices, unless the numbering changed in between.
// Replicas that number their rows differently stop with an error naming the worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/embedding/local_embedding_store.h"
#include "core/error.h"
#include "tests/testing/loopback_group.h"
#include "tests/testing/run_ranks.h"
#include "tools/trainer/replicated_embedding_store.h"

namespace aiacc::trainer {
namespace {

using aiacc::testing::free_port;
using aiacc::testing::loopback_cluster;
using aiacc::testing::loopback_role;
using aiacc::testing::run_ranks;
using ::testing::HasSubstr;

// Three workers: 1/3 is not exact, so the scale's rounding is the same in both or the test fails.
constexpr int kWorkers = 3;

// Two tables, so each worker's message holds two parts one after the other.
struct Table {
  const char* name;
  std::int64_t dim;
};
constexpr Table kTables[] = {{"deep.C1", 3}, {"wide.C1", 1}};

EmbeddingTableSpec table_spec(const Table& table) {
  EmbeddingTableSpec spec;
  spec.name = table.name;
  spec.dim = table.dim;
  spec.seed = 7;
  return spec;
}

optim::OptimizerOptions adagrad() {
  optim::OptimizerOptions options;
  options.type = "adagrad";
  options.lr = 0.1;
  return options;
}

// Worker w's ids of table t at `step`: 40 positions over 30 ids in an order that moves on, so
// each step has ids one worker pushes twice, rows several workers update and rows one updates,
// in an order that is not sorted; the first step and the one after the load number them.
std::vector<std::int64_t> ids_of(int worker, int step, int t) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 40; ++i) ids.push_back(((i * 7 + worker * 13 + step * 5 + t * 3) % 30) * 1000003 + 11);
  return ids;
}

// A gradient value that differs for every (worker, step, table, position, column).
std::vector<float> grads_of(int worker, int step, int t) {
  std::vector<float> grads;
  for (std::size_t p = 0; p < ids_of(worker, step, t).size(); ++p) {
    for (std::int64_t c = 0; c < kTables[t].dim; ++c) {
      grads.push_back(0.01f * static_cast<float>((worker + 1) * 31 + step * 7 + t * 5 + static_cast<int>(p) * 3 + c) -
                      0.5f);
    }
  }
  return grads;
}

// The update the replicas must apply for one step's pushes (ids and their gradient rows): each
// id's gradients summed in push order (worker by worker, a worker's positions in order) and
// multiplied by 1 / the worker count, given to one reference store.
using Push = std::pair<std::vector<std::int64_t>, std::vector<float>>;
void push_averaged(LocalEmbeddingStore& store, const std::vector<Push>& pushes, std::size_t dim, double lr) {
  std::vector<std::int64_t> order;
  std::map<std::int64_t, std::vector<float>> sums;
  for (const auto& [ids, grads] : pushes) {
    for (std::size_t p = 0; p < ids.size(); ++p) {
      auto [it, fresh] = sums.try_emplace(ids[p], std::vector<float>(dim, 0.0f));
      if (fresh) order.push_back(ids[p]);
      for (std::size_t c = 0; c < dim; ++c) {
        float& sum = it->second[c];
        sum = fresh ? grads[p * dim + c] : sum + grads[p * dim + c];
      }
    }
  }
  std::vector<float> merged;
  for (std::int64_t id : order) {
    for (float g : sums[id]) merged.push_back(g * (1.0f / kWorkers));
  }
  store.push(order, merged.data(), lr);
}

// The reference's step: every worker's pushes of table t at `step`.
void reference_step(LocalEmbeddingStore& store, int step, int t, double lr) {
  std::vector<Push> pushes;
  for (int w = 0; w < kWorkers; ++w) pushes.emplace_back(ids_of(w, step, t), grads_of(w, step, t));
  push_averaged(store, pushes, static_cast<std::size_t>(kTables[t].dim), lr);
}

// The three tensors of save_rows(), by name.
std::map<std::string, Tensor> rows_by_name(const EmbeddingStore& store) {
  std::map<std::string, Tensor> out;
  for (auto& [name, tensor] : store.save_rows()) out[name] = tensor;
  return out;
}

void expect_equal_rows(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                       const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (const auto& [name, tensor] : want) {
    const Tensor& other = got.at(name);
    ASSERT_EQ(other.shape(), tensor.shape()) << where << ": " << name;
    ASSERT_EQ(other.num_bytes(), tensor.num_bytes()) << where << ": " << name;
    EXPECT_EQ(std::memcmp(other.raw_data(), tensor.raw_data(), tensor.num_bytes()), 0) << where << ": " << name;
  }
}

class ReplicatedEmbeddingStoreNumbering : public ::testing::TestWithParam<std::size_t> {};

// Every row numbered (the default cap is far above the 30 ids here), or only the first 20 to
// be updated: the others then go by id every step.
INSTANTIATE_TEST_SUITE_P(NumberedRows, ReplicatedEmbeddingStoreNumbering,
                         ::testing::Values(ReplicatedEmbeddingStore::kMaxNumberedRows, std::size_t{20}));

TEST_P(ReplicatedEmbeddingStoreNumbering, EveryReplicaEqualsOneStoreGivenTheAveragedGradient) {
  constexpr int kSteps = 6;
  constexpr int kLoadAfter = 3;  // steps before the checkpoint's rows are loaded
  constexpr std::size_t kNumTables = std::size(kTables);
  const double lr = 0.1;
  // The references (one store per table), their rows after each step, and the rows a
  // checkpoint taken after kLoadAfter steps holds.
  std::vector<std::unique_ptr<LocalEmbeddingStore>> reference;
  for (const Table& table : kTables) reference.push_back(std::make_unique<LocalEmbeddingStore>(table_spec(table), adagrad()));
  std::vector<std::vector<std::map<std::string, Tensor>>> reference_after(kNumTables);
  std::vector<std::vector<std::pair<std::string, Tensor>>> checkpoint(kNumTables);
  // What each worker's pull must read before each step: expected_pull[w][t][step] (read-only
  // pulls leave the reference's rows as they are and give an absent row its initial values).
  std::vector<std::vector<std::vector<std::vector<float>>>> expected_pull(
      kWorkers, std::vector<std::vector<std::vector<float>>>(kNumTables));
  for (int step = 0; step < kSteps; ++step) {
    for (std::size_t t = 0; t < kNumTables; ++t) {
      reference[t]->set_read_only(true);
      for (int w = 0; w < kWorkers; ++w) {
        const auto ids = ids_of(w, step, static_cast<int>(t));
        auto& rows = expected_pull[static_cast<std::size_t>(w)][t].emplace_back(ids.size() * static_cast<std::size_t>(kTables[t].dim));
        reference[t]->pull(ids, rows.data());
      }
      reference[t]->set_read_only(false);
      reference_step(*reference[t], step, static_cast<int>(t), lr);
      reference_after[t].push_back(rows_by_name(*reference[t]));
      if (step + 1 == kLoadAfter) checkpoint[t] = reference[t]->save_rows();
    }
  }
  // replica_after[w][t][step], pulled[w][t][step]
  std::vector<std::vector<std::vector<std::map<std::string, Tensor>>>> replica_after(
      kWorkers, std::vector<std::vector<std::map<std::string, Tensor>>>(kNumTables));
  std::vector<std::vector<std::vector<std::vector<float>>>> pulled(
      kWorkers, std::vector<std::vector<std::vector<float>>>(kNumTables));
  const int port = free_port();
  run_ranks(kWorkers, [&](int rank) {
    ProcessGroup group(loopback_cluster(kWorkers, 20), loopback_role(rank, kWorkers, port));
    std::vector<std::unique_ptr<ReplicatedEmbeddingStore>> stores;
    std::vector<ReplicatedEmbeddingStore*> tables;
    for (const Table& table : kTables) {
      stores.push_back(std::make_unique<ReplicatedEmbeddingStore>(table_spec(table), adagrad(), group,
                                                                  LocalEmbeddingStoreOptions{}, GetParam()));
      tables.push_back(stores.back().get());
    }
    for (int step = 0; step < kSteps; ++step) {
      for (std::size_t t = 0; t < kNumTables; ++t) {
        ReplicatedEmbeddingStore& store = *stores[t];
        const auto dim = static_cast<std::size_t>(kTables[t].dim);
        const auto ids = ids_of(rank, step, static_cast<int>(t));
        // Creates this worker's new rows in its own order; numbered rows are read by index.
        std::vector<float>& rows = pulled[static_cast<std::size_t>(rank)][t].emplace_back(ids.size() * dim);
        store.pull(ids, rows.data());
        // Loaded between the pull and the push: the indices the pull found belong to the
        // numbering the load ends (the rows' values are the same as the checkpoint's).
        if (step == kLoadAfter) store.load_rows(checkpoint[t]);
        const auto grads = grads_of(rank, step, static_cast<int>(t));
        if (step == 1 || step == 4) {
          // Pushed in two parts (not the ids pulled): merged like one, each row looked up.
          const std::size_t half = ids.size() / 2;
          store.push(std::span(ids).first(half), grads.data(), lr);
          store.push(std::span(ids).subspan(half), grads.data() + half * dim, lr);
        } else {
          store.push(ids, grads.data(), lr);  // the ids pulled: their indices come from the pull
        }
      }
      ReplicatedEmbeddingStore::synchronize(tables, group);
      for (std::size_t t = 0; t < kNumTables; ++t) {
        replica_after[static_cast<std::size_t>(rank)][t].push_back(rows_by_name(*stores[t]));
      }
    }
  });
  for (int w = 0; w < kWorkers; ++w) {
    for (std::size_t t = 0; t < kNumTables; ++t) {
      for (int step = 0; step < kSteps; ++step) {
        expect_equal_rows(replica_after[static_cast<std::size_t>(w)][t][static_cast<std::size_t>(step)],
                          reference_after[t][static_cast<std::size_t>(step)],
                          fmt::format("worker {}, table {}, after step {}", w, kTables[t].name, step + 1));
        const auto& got = pulled[static_cast<std::size_t>(w)][t][static_cast<std::size_t>(step)];
        const auto& want = expected_pull[static_cast<std::size_t>(w)][t][static_cast<std::size_t>(step)];
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << fmt::format("worker {}, table {}, pulled before step {}", w, kTables[t].name, step + 1);
      }
    }
  }
}

// A pull's indices are only good under the numbering it saw. Worker 0 pulls rows, the others
// number them meanwhile (a step in which worker 0 pushes nothing), and only then does worker 0
// push them: they must go by their new numbers, as the others' do, or the merge would update
// each such row twice. Then every worker pushes, loads the checkpoint and pushes again in one
// step: the first push's indices belong to the numbering the load ended. Every replica must end
// equal, bit for bit, to one store given the same averaged gradients.
TEST(ReplicatedEmbeddingStore, IndicesFromAPullAreNotUsedOnceTheNumberingChanged) {
  const Table& table = kTables[0];
  const auto dim = static_cast<std::size_t>(table.dim);
  const double lr = 0.1;
  const auto ids = ids_of(0, 0, 0);    // the same 40 positions over 30 ids on every worker
  const auto grads = grads_of(0, 0, 0);
  // The reference: the averaged gradients of the workers that push in each step.
  LocalEmbeddingStore reference(table_spec(table), adagrad());
  for (int pushing : {kWorkers - 1, kWorkers, kWorkers}) {
    push_averaged(reference, std::vector<Push>(static_cast<std::size_t>(pushing), Push(ids, grads)), dim, lr);
  }
  std::vector<std::map<std::string, Tensor>> replica_rows(kWorkers);
  const int port = free_port();
  run_ranks(kWorkers, [&](int rank) {
    ProcessGroup group(loopback_cluster(kWorkers, 20), loopback_role(rank, kWorkers, port));
    ReplicatedEmbeddingStore store(table_spec(table), adagrad(), group);
    std::vector<float> rows(ids.size() * dim);
    // Step 1: every worker pulls (nothing numbered yet); all but worker 0 push, numbering the rows.
    store.pull(ids, rows.data());
    if (rank != 0) store.push(ids, grads.data(), lr);
    ReplicatedEmbeddingStore::synchronize({&store}, group);
    // Step 2: worker 0 pushes what it pulled before the numbering; the others pull again first.
    if (rank != 0) store.pull(ids, rows.data());
    store.push(ids, grads.data(), lr);
    ReplicatedEmbeddingStore::synchronize({&store}, group);
    // Step 3: a push of zeros as pulled; then this same state loaded as a checkpoint, which
    // clears the numbering, a pull and the real push. The zeros add nothing to the merged rows,
    // but their indices belong to the cleared numbering: they must be looked up again.
    const auto saved = store.save_rows();
    store.pull(ids, rows.data());
    const std::vector<float> zeros(grads.size(), 0.0f);
    store.push(ids, zeros.data(), lr);
    store.load_rows(saved);
    store.pull(ids, rows.data());
    store.push(ids, grads.data(), lr);
    ReplicatedEmbeddingStore::synchronize({&store}, group);
    replica_rows[static_cast<std::size_t>(rank)] = rows_by_name(store);
  });
  for (int w = 0; w < kWorkers; ++w) {
    expect_equal_rows(replica_rows[static_cast<std::size_t>(w)], rows_by_name(reference), fmt::format("worker {}", w));
  }
}

TEST(ReplicatedEmbeddingStore, ReplicasNumberingTheirRowsDifferentlyStopNamingTheWorker) {
  std::vector<std::string> errors(kWorkers);
  const int port = free_port();
  run_ranks(kWorkers, [&](int rank) {
    ProcessGroup group(loopback_cluster(kWorkers, 20), loopback_role(rank, kWorkers, port));
    ReplicatedEmbeddingStore store(table_spec(kTables[0]), adagrad(), group);
    const auto ids = ids_of(0, 0, 0);  // 30 distinct ids
    const auto grads = grads_of(0, 0, 0);
    store.push(ids, grads.data(), 0.1);
    ReplicatedEmbeddingStore::synchronize({&store}, group);  // all number the 30 rows
    if (rank == 1) store.load_rows(store.save_rows());       // worker 1 alone starts again
    store.push(ids, grads.data(), 0.1);
    try {
      ReplicatedEmbeddingStore::synchronize({&store}, group);
    } catch (const InternalError& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  EXPECT_THAT(errors[0], HasSubstr("replicated table 'deep.C1': worker 1 numbers 0 rows (hash 0000000000000000), "
                                   "this worker 30 (hash "));
  EXPECT_THAT(errors[1], HasSubstr("replicated table 'deep.C1': worker 0 numbers 30 rows (hash "));
  EXPECT_THAT(errors[1], HasSubstr("this worker 0 (hash 0000000000000000): the replicas have diverged"));
  EXPECT_THAT(errors[2], HasSubstr("worker 1 numbers 0 rows"));
}

}  // namespace
}  // namespace aiacc::trainer
