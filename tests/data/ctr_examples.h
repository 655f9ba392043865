// Test helper for CTR datasets: every example of a dataset as plain vectors, read in an order
// that crosses the dataset's halves (and its files' boundaries) back and forth, so two datasets
// compare equal only when each index holds the same example.
#pragma once

#include <cstdint>
#include <numeric>
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
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset.size()));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = 0; i + 1 < order.size(); i += 2) std::swap(order[i], order[order.size() - 1 - i]);
  Batch batch;
  dataset.read(order, batch);
  CtrExamples e{batch.labels.to_vector<float>(), batch.inputs.to_vector<float>(), {}};
  for (const SparseField& field : batch.sparse) e.ids.push_back(field.ids);
  return e;
}

}  // namespace aiacc::data::testing
