// ReplicatedEmbeddingStore against a single LocalEmbeddingStore that is given each step's
// averaged gradient: workers as threads of this process, each with its own ProcessGroup on
// loopback. Rows reach the merge by id on their first update and by their dense index after it;
// either way every replica must equal the reference bit for bit, over steps that mix known,
// new and repeated ids, and after a checkpoint's rows are loaded (which renumbers the rows).
// Replicas that number their rows differently stop with an error naming the worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

constexpr int kWorkers = 2;
constexpr std::int64_t kDim = 3;

EmbeddingTableSpec table_spec() {
  EmbeddingTableSpec spec;
  spec.name = "deep.C1";
  spec.dim = kDim;
  spec.seed = 7;
  return spec;
}

optim::OptimizerOptions adagrad() {
  optim::OptimizerOptions options;
  options.type = "adagrad";
  options.lr = 0.1;
  return options;
}

// Worker w's ids at `step`: overlapping ranges that move on, so each step has rows both
// workers update, rows one updates, rows updated before and rows never seen, in an order
// that is not sorted.
std::vector<std::int64_t> ids_of(int worker, int step) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 40; ++i) ids.push_back(((i * 7 + worker * 13 + step * 5) % 60) * 1000003 + 11);
  return ids;
}

// A gradient value that differs for every (worker, step, id position, column).
float grad_of(int worker, int step, std::size_t position, std::int64_t column) {
  return 0.01f * static_cast<float>((worker + 1) * 31 + step * 7 + static_cast<int>(position) * 3 + column) - 0.5f;
}

std::vector<float> grads_of(int worker, int step) {
  std::vector<float> grads;
  for (std::size_t p = 0; p < ids_of(worker, step).size(); ++p) {
    for (std::int64_t c = 0; c < kDim; ++c) grads.push_back(grad_of(worker, step, p, c));
  }
  return grads;
}

// The reference: one store given, per step, each id's gradients summed in worker order and
// divided by the worker count (the merged update the replicas must apply).
void reference_step(LocalEmbeddingStore& store, int step, double lr) {
  std::vector<std::int64_t> order;
  std::map<std::int64_t, std::vector<float>> sums;
  for (int w = 0; w < kWorkers; ++w) {
    const auto ids = ids_of(w, step);
    const auto grads = grads_of(w, step);
    for (std::size_t p = 0; p < ids.size(); ++p) {
      auto [it, fresh] = sums.try_emplace(ids[p], std::vector<float>(kDim, 0.0f));
      if (fresh) order.push_back(ids[p]);
      for (std::int64_t c = 0; c < kDim; ++c) {
        float& sum = it->second[static_cast<std::size_t>(c)];
        sum = fresh ? grads[p * kDim + c] : sum + grads[p * kDim + c];
      }
    }
  }
  std::vector<float> merged;
  for (std::int64_t id : order) {
    for (float g : sums[id]) merged.push_back(g * (1.0f / kWorkers));
  }
  store.push(order, merged.data(), lr);
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

// Every row numbered (the default cap is far above the 60 ids here), or only the first 25 to
// be updated: the others then go by id every step.
INSTANTIATE_TEST_SUITE_P(NumberedRows, ReplicatedEmbeddingStoreNumbering,
                         ::testing::Values(ReplicatedEmbeddingStore::kMaxNumberedRows, std::size_t{25}));

TEST_P(ReplicatedEmbeddingStoreNumbering, EveryReplicaEqualsOneStoreGivenTheAveragedGradient) {
  constexpr int kSteps = 6;
  constexpr int kLoadAfter = 3;  // steps before the checkpoint's rows are loaded
  const double lr = 0.1;
  // The reference, and the rows a checkpoint taken after kLoadAfter steps holds.
  LocalEmbeddingStore reference(table_spec(), adagrad());
  std::vector<std::map<std::string, Tensor>> reference_after(kSteps);
  std::vector<std::pair<std::string, Tensor>> checkpoint;
  for (int step = 0; step < kSteps; ++step) {
    reference_step(reference, step, lr);
    reference_after[static_cast<std::size_t>(step)] = rows_by_name(reference);
    if (step + 1 == kLoadAfter) checkpoint = reference.save_rows();
  }
  std::vector<std::vector<std::map<std::string, Tensor>>> replica_after(kWorkers);
  const int port = free_port();
  run_ranks(kWorkers, [&](int rank) {
    ProcessGroup group(loopback_cluster(kWorkers, 20), loopback_role(rank, kWorkers, port));
    ReplicatedEmbeddingStore store(table_spec(), adagrad(), group, {}, GetParam());
    auto& after = replica_after[static_cast<std::size_t>(rank)];
    for (int step = 0; step < kSteps; ++step) {
      if (step == kLoadAfter) store.load_rows(checkpoint);
      const auto ids = ids_of(rank, step);
      std::vector<float> rows(ids.size() * kDim);
      store.pull(ids, rows.data());  // creates this worker's new rows in its own order
      const auto grads = grads_of(rank, step);
      // Pushed in two parts, as micro-batches would: merged like one.
      const std::size_t half = ids.size() / 2;
      store.push(std::span(ids).first(half), grads.data(), lr);
      store.push(std::span(ids).subspan(half), grads.data() + half * kDim, lr);
      ReplicatedEmbeddingStore::synchronize({&store}, group);
      after.push_back(rows_by_name(store));
    }
  });
  for (int w = 0; w < kWorkers; ++w) {
    for (int step = 0; step < kSteps; ++step) {
      expect_equal_rows(replica_after[static_cast<std::size_t>(w)][static_cast<std::size_t>(step)],
                        reference_after[static_cast<std::size_t>(step)],
                        "worker " + std::to_string(w) + " after step " + std::to_string(step + 1));
    }
  }
}

TEST(ReplicatedEmbeddingStore, ReplicasNumberingTheirRowsDifferentlyStopNamingTheWorker) {
  std::vector<std::string> errors(kWorkers);
  const int port = free_port();
  run_ranks(kWorkers, [&](int rank) {
    ProcessGroup group(loopback_cluster(kWorkers, 20), loopback_role(rank, kWorkers, port));
    ReplicatedEmbeddingStore store(table_spec(), adagrad(), group);
    const auto ids = ids_of(0, 0);
    const auto grads = grads_of(0, 0);
    store.push(ids, grads.data(), 0.1);
    ReplicatedEmbeddingStore::synchronize({&store}, group);  // both number the 40 rows
    if (rank == 1) store.load_rows(store.save_rows());       // worker 1 alone starts again
    store.push(ids, grads.data(), 0.1);
    try {
      ReplicatedEmbeddingStore::synchronize({&store}, group);
    } catch (const InternalError& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  EXPECT_THAT(errors[0], HasSubstr("replicated table 'deep.C1': worker 1 numbers 0 rows, this worker 40"));
  EXPECT_THAT(errors[1], HasSubstr("replicated table 'deep.C1': worker 0 numbers 40 rows, this worker 0"));
}

}  // namespace
}  // namespace aiacc::trainer
