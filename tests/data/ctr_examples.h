// Test helper for CTR datasets: every example of a dataset as plain vectors, read in a fixed
// shuffled order (crossing its files' boundaries back and forth) and put back in index order, so
// two datasets compare equal only when each index holds the same example.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/batch.h"
#include "data/dataset.h"

namespace aiacc::data::testing {

struct CtrExamples {
  std::vector<float> labels, inputs;
  std::vector<std::vector<std::int64_t>> ids;  // by field
  bool operator==(const CtrExamples&) const = default;
};

inline CtrExamples read_scrambled(Dataset& dataset) {
  const auto n = static_cast<std::size_t>(dataset.size());
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  Batch batch;
  dataset.read(order, batch);
  // Back to index order: position k of the batch holds example order[k].
  const std::vector<float> labels = batch.labels.to_vector<float>(), inputs = batch.inputs.to_vector<float>();
  const std::size_t width = n == 0 ? 0 : inputs.size() / n;
  CtrExamples e{std::vector<float>(n), std::vector<float>(inputs.size()), {}};
  for (std::size_t k = 0; k < n; ++k) {
    const auto at = static_cast<std::size_t>(order[k]);
    e.labels[at] = labels[k];
    std::copy_n(inputs.begin() + static_cast<std::ptrdiff_t>(k * width), width,
                e.inputs.begin() + static_cast<std::ptrdiff_t>(at * width));
  }
  for (const SparseField& field : batch.sparse) {
    std::vector<std::int64_t> ids(n);
    for (std::size_t k = 0; k < n; ++k) ids[static_cast<std::size_t>(order[k])] = field.ids[k];
    e.ids.push_back(std::move(ids));
  }
  return e;
}

}  // namespace aiacc::data::testing
