// Test helpers for Wide&Deep: an embedding store that records what the model does to it (pulls,
// pushes) and whose float rows a test may perturb directly, a factory that keeps the stores it
// made by table name, and a builder of CTR batches.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/batch.h"
#include "core/embedding/embedding_store.h"
#include "core/error.h"
#include "core/util/random.h"

namespace aiacc::testing {

// Rows created on first touch from (id, seed) like LocalEmbeddingStore; push applies plain SGD.
class RecordingStore final : public EmbeddingStore {
 public:
  explicit RecordingStore(const EmbeddingTableSpec& spec) : spec_(spec) {}
  const EmbeddingTableSpec& spec() const override { return spec_; }

  void pull(std::span<const std::int64_t> ids, float* rows) override {
    ++pulls;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::vector<float>& r = row(ids[i]);
      std::copy(r.begin(), r.end(), rows + i * r.size());
    }
  }
  void push(std::span<const std::int64_t> ids, const float* grads, double lr) override {
    ++pushes;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::vector<float>& r = row(ids[i]);
      for (std::size_t j = 0; j < r.size(); ++j) r[j] -= static_cast<float>(lr) * grads[i * r.size() + j];
    }
  }
  std::int64_t num_rows() const override { return static_cast<std::int64_t>(rows_.size()); }
  std::vector<std::pair<std::string, Tensor>> save_rows() const override {
    throw Error("RecordingStore does not checkpoint");
  }
  void load_rows(const std::vector<std::pair<std::string, Tensor>>&) override {
    throw Error("RecordingStore does not checkpoint");
  }

  // The row of `id`, created if missing; tests may change it in place.
  std::vector<float>& row(std::int64_t id) {
    auto it = rows_.find(id);
    if (it != rows_.end()) return it->second;
    std::vector<float> fresh(static_cast<std::size_t>(spec_.dim));
    Rng rng(mix64(static_cast<std::uint64_t>(id) ^ spec_.seed));
    for (float& v : fresh) v = static_cast<float>(rng.uniform(-spec_.init_scale, spec_.init_scale));
    return rows_.emplace(id, std::move(fresh)).first->second;
  }

  int pulls = 0;
  int pushes = 0;

 private:
  EmbeddingTableSpec spec_;
  std::unordered_map<std::int64_t, std::vector<float>> rows_;
};

// Wraps a store factory and keeps every store it made, by table name, in creation order.
struct KeepingFactory {
  explicit KeepingFactory(EmbeddingStoreFactory wrapped) : inner(std::move(wrapped)) {}

  EmbeddingStoreFactory inner;
  std::map<std::string, std::shared_ptr<EmbeddingStore>> stores;
  std::vector<std::string> order;

  EmbeddingStoreFactory factory() {
    return [this](const EmbeddingTableSpec& spec) {
      std::shared_ptr<EmbeddingStore> store = inner(spec);
      stores[spec.name] = store;
      order.push_back(spec.name);
      return store;
    };
  }
};

inline EmbeddingStoreFactory recording_factory() {
  return [](const EmbeddingTableSpec& spec) { return std::make_shared<RecordingStore>(spec); };
}

// A CTR batch: fields[f][i] are example i's raw values of field f (any count, multi-hot or
// none), ints [N, I] row-major, labels [N].
inline Batch ctr_batch(const std::vector<std::vector<std::vector<std::int64_t>>>& fields,
                       const std::vector<float>& ints, std::int64_t num_int,
                       const std::vector<float>& labels) {
  Batch batch;
  const auto n = static_cast<std::int64_t>(labels.size());
  batch.inputs = Tensor::from_vector(ints, Shape{n, num_int});
  batch.labels = Tensor::from_vector(labels, Shape{n});
  for (const auto& field : fields) {
    SparseField sparse;
    sparse.offsets.push_back(0);
    for (const auto& bag : field) {
      sparse.ids.insert(sparse.ids.end(), bag.begin(), bag.end());
      sparse.offsets.push_back(static_cast<std::int64_t>(sparse.ids.size()));
    }
    batch.sparse.push_back(std::move(sparse));
  }
  return batch;
}

}  // namespace aiacc::testing
