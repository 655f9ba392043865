// CTR column storage and the copy of selected examples into a Batch.
#include "data/detail/ctr_columns.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.h"

namespace aiacc::data::detail {
namespace {

// Small counts dominate CTR data; a table spares log1p on the parsing hot path.
constexpr std::int64_t kTableSize = 4096;

const std::array<float, kTableSize>& log1p_table() {
  static const std::array<float, kTableSize> table = [] {
    std::array<float, kTableSize> t{};
    for (std::int64_t x = 0; x < kTableSize; ++x) t[static_cast<std::size_t>(x)] = static_cast<float>(std::log1p(static_cast<double>(x)));
    return t;
  }();
  return table;
}

template <class T>
void append_vector(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

float transform_integer(std::int64_t value) {
  if (value <= 0) return 0.0f;
  if (value < kTableSize) return log1p_table()[static_cast<std::size_t>(value)];
  return static_cast<float>(std::log1p(static_cast<double>(value)));
}

void CtrColumns::reserve(std::int64_t count) {
  const auto n = static_cast<std::size_t>(count);
  labels.reserve(n);
  integers.reserve(n * static_cast<std::size_t>(num_integer));
  categoricals.reserve(n * static_cast<std::size_t>(num_categorical));
  missing.reserve(n * missing_stride());
}

void CtrColumns::append(const CtrColumns& other) {
  AIACC_CHECK(other.num_integer == num_integer && other.num_categorical == num_categorical,
              "appending {}+{} columns to {}+{}", other.num_integer, other.num_categorical, num_integer,
              num_categorical);
  append_vector(labels, other.labels);
  append_vector(integers, other.integers);
  append_vector(categoricals, other.categoricals);
  append_vector(missing, other.missing);
}

void CtrColumns::truncate(std::int64_t count) {
  if (count >= size()) return;
  const auto n = static_cast<std::size_t>(count);
  labels.resize(n);
  integers.resize(n * static_cast<std::size_t>(num_integer));
  categoricals.resize(n * static_cast<std::size_t>(num_categorical));
  missing.resize(n * missing_stride());
}

void CtrColumns::shrink_to_fit() {
  labels.shrink_to_fit();
  integers.shrink_to_fit();
  categoricals.shrink_to_fit();
  missing.shrink_to_fit();
}

InputSpec ctr_spec(int num_integer, const std::vector<std::string>& field_names) {
  InputSpec spec;
  spec.task = Task::binary;
  spec.example_shape = Shape{num_integer};
  spec.num_classes = 0;
  spec.sparse_fields = field_names;
  return spec;
}

void allocate_ctr_batch(std::int64_t count, int num_integer, int num_categorical, Batch& batch) {
  batch.inputs = Tensor::empty(Shape{count, num_integer});
  batch.labels = Tensor::empty(Shape{count});
  batch.sparse.resize(static_cast<std::size_t>(num_categorical));
  for (SparseField& field : batch.sparse) {
    field.ids.resize(static_cast<std::size_t>(count));
    field.offsets.resize(static_cast<std::size_t>(count) + 1);
    for (std::int64_t i = 0; i <= count; ++i) field.offsets[static_cast<std::size_t>(i)] = i;
  }
}

void read_ctr_batch(const CtrColumnsView& columns, std::span<const std::int64_t> indices, Batch& batch) {
  const std::int64_t starts[2] = {0, columns.size()};
  read_ctr_batch(std::span<const CtrColumnsView>(&columns, 1), starts, indices, batch);
}

void read_ctr_batch(std::span<const CtrColumnsView> parts, std::span<const std::int64_t> starts,
                    std::span<const std::int64_t> indices, Batch& batch) {
  AIACC_CHECK(!parts.empty() && starts.size() == parts.size() + 1, "{} parts with {} starts", parts.size(),
              starts.size());
  const auto n = static_cast<std::int64_t>(indices.size());
  const int num_integer = parts.front().num_integer, num_categorical = parts.front().num_categorical;
  const auto ni = static_cast<std::size_t>(num_integer);
  const auto nc = static_cast<std::size_t>(num_categorical);
  const std::int64_t total = starts.back();
  allocate_ctr_batch(n, num_integer, num_categorical, batch);
  float* inputs = batch.inputs.data<float>();
  float* labels = batch.labels.data<float>();
  // The part holding `index`: the last whose start is not above it (one part: the first).
  auto part_of = [&](std::int64_t index) {
    return parts.size() == 1
               ? std::size_t{0}
               : static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end() - 1, index) - starts.begin() - 1);
  };
  // Shuffled examples are scattered over the columns: each one's four reads would wait for
  // memory in turn. Asking for the example kPrefetchAhead positions on first keeps several in
  // flight.
  auto prefetch = [&](std::int64_t i) {
    const std::int64_t index = indices[static_cast<std::size_t>(i)];
    if (index < 0 || index >= total) return;  // reported when its turn comes
    const std::size_t part = part_of(index);
    const CtrColumnsView& columns = parts[part];
    const auto row = static_cast<std::size_t>(index - starts[part]);
    __builtin_prefetch(columns.labels + row);
    __builtin_prefetch(columns.integers + row * ni);
    __builtin_prefetch(columns.categoricals + row * nc);
    __builtin_prefetch(columns.missing + row * columns.missing_stride());
  };
  constexpr std::int64_t kPrefetchAhead = 8;
  for (std::int64_t i = 0; i < std::min(n, kPrefetchAhead); ++i) prefetch(i);
  for (std::int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) prefetch(i + kPrefetchAhead);
    const std::int64_t index = indices[static_cast<std::size_t>(i)];
    AIACC_CHECK(index >= 0 && index < total, "example index {} of {}", index, total);
    const std::size_t part = part_of(index);
    const CtrColumnsView& columns = parts[part];
    const std::int64_t example = index - starts[part];
    const auto row = static_cast<std::size_t>(example);
    labels[i] = columns.labels[row];
    std::copy_n(columns.integers + row * ni, ni, inputs + static_cast<std::size_t>(i) * ni);
    const std::uint32_t* values = columns.categoricals + row * nc;
    for (std::size_t c = 0; c < nc; ++c) {
      batch.sparse[c].ids[static_cast<std::size_t>(i)] =
          columns.is_missing(example, static_cast<int>(c)) ? -1 : static_cast<std::int64_t>(values[c]);
    }
  }
}

}  // namespace aiacc::data::detail
