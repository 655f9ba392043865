// Compact in-memory CTR examples (label, integer features, categorical values) and the batch
// layout every CTR dataset produces. Internal to data/.
//
// The CTR batch contract (agreed with models/wide_deep), N = examples, I = integer features,
// C = categorical fields:
//   inputs  [N, I] f32: the integer features as log1p(max(x, 0)); a missing value reads as 0.
//   labels  [N] f32: 0 or 1.
//   sparse  C SparseFields, one per categorical field in column order; each example holds
//           exactly one id per field (offsets = 0, 1, ..., N): the field's 32-bit value as a
//           non-negative int64, or -1 when the field is missing. The model hashes ids itself.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"

namespace aiacc::data::detail {

// The transform of a raw integer feature: log1p(max(x, 0)). Why: Criteo counts are heavy-tailed
// (up to millions); the log keeps them in a range an MLP trains on, and negative values (a few
// Criteo columns hold -1, -2) carry no count, so they clamp to 0, like a missing value.
float transform_integer(std::int64_t value);

// Read-only columns of N examples, wherever they live: a CtrColumns in memory, or a parsed
// file's cache mapped from disk (data/detail/ctr_cache.h). Nothing may be read through them when
// N is 0.
struct CtrColumnsView {
  int num_integer = 0;
  int num_categorical = 0;
  std::int64_t count = 0;
  const std::uint8_t* labels = nullptr;         // [N]
  const float* integers = nullptr;              // [N, I]
  const std::uint32_t* categoricals = nullptr;  // [N, C]
  const std::uint8_t* missing = nullptr;        // [N, missing_stride()]

  std::int64_t size() const { return count; }
  std::size_t missing_stride() const { return (static_cast<std::size_t>(num_categorical) + 7) / 8; }
  std::size_t bytes_per_example() const {
    return 1 + 4 * static_cast<std::size_t>(num_integer) + 4 * static_cast<std::size_t>(num_categorical) +
           missing_stride();
  }
  bool is_missing(std::int64_t example, int field) const {
    return (missing[static_cast<std::size_t>(example) * missing_stride() + static_cast<std::size_t>(field) / 8] >>
            (field % 8)) & 1u;
  }
};

// Struct of arrays, row-major per example. Memory per example:
//   1 + 4*I + 4*C + ceil(C/8) bytes (Criteo 13 + 26: 161 bytes; flights 5 + 3: 34 bytes).
struct CtrColumns {
  int num_integer = 0;
  int num_categorical = 0;
  std::vector<std::uint8_t> labels;         // [N], 0 or 1
  std::vector<float> integers;              // [N, I], already transformed
  std::vector<std::uint32_t> categoricals;  // [N, C], 0 where missing
  std::vector<std::uint8_t> missing;        // [N, missing_stride()]: bit c%8 of byte c/8 = field c missing

  CtrColumns() = default;
  CtrColumns(int num_integer, int num_categorical) : num_integer(num_integer), num_categorical(num_categorical) {}

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::size_t missing_stride() const { return view().missing_stride(); }
  std::size_t bytes_per_example() const { return view().bytes_per_example(); }
  bool is_missing(std::int64_t example, int field) const { return view().is_missing(example, field); }

  CtrColumnsView view() const {
    return {num_integer, num_categorical, size(), labels.data(), integers.data(), categoricals.data(), missing.data()};
  }

  void reserve(std::int64_t count);
  // Appends all of `other` (same column counts).
  void append(const CtrColumns& other);
  // Keeps the first `count` examples.
  void truncate(std::int64_t count);
  // Releases spare capacity (after loading).
  void shrink_to_fit();
};

// The InputSpec of CTR data: Task::binary, example_shape [I], num_classes 0, the field names.
InputSpec ctr_spec(int num_integer, const std::vector<std::string>& field_names);

// Allocates `batch` for `count` CTR examples as the contract above says (inputs, labels and
// num_categorical sparse fields with offsets 0..count already set, ids sized count).
void allocate_ctr_batch(std::int64_t count, int num_integer, int num_categorical, Batch& batch);

// Fills `batch` with examples `indices` of `columns`. Throws InternalError for an index out of
// range. Thread-safe for concurrent readers (reads `columns` only).
void read_ctr_batch(const CtrColumnsView& columns, std::span<const std::int64_t> indices, Batch& batch);
// The same over the concatenation of `parts` (same column counts): example k of part p has index
// starts[p] + k; `starts` has parts.size() + 1 entries, the last one the total.
void read_ctr_batch(std::span<const CtrColumnsView> parts, std::span<const std::int64_t> starts,
                    std::span<const std::int64_t> indices, Batch& batch);

}  // namespace aiacc::data::detail
