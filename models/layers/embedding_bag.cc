// EmbeddingBag layer: id folding, de-duplication, row gather and sparse-gradient bookkeeping
// around the storage-independent kernels in core/kernels/embedding_bag.
#include "models/layers/embedding_bag.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/util/parallel_for.h"
#include "core/util/random.h"

namespace aiacc::models {
namespace {

// Below this many bytes a row gather is not worth an OpenMP fork/join.
constexpr std::size_t kMinParallelGatherBytes = std::size_t{1} << 16;

// The initial table: row r drawn from Rng(seed, r), so each row is reproducible on its own
// (a parameter server creating rows on first touch can use the same rule).
Tensor make_table(const std::string& name, const EmbeddingBagOptions& o) {
  AIACC_CHECK(o.num_rows > 0 && o.dim > 0, "{}: embedding table [{}, {}]", name, o.num_rows, o.dim);
  AIACC_CHECK(o.dtype == DType::f32 || o.dtype == DType::f64, "{}: embedding dtype {} (f32 or f64)",
              name, dtype_name(o.dtype));
  AIACC_CHECK_GE(o.init_scale, 0.0, "{}: embedding init_scale", name);
  Tensor table = Tensor::empty({o.num_rows, o.dim}, DType::f64);
  double* values = table.data<double>();
  for (std::int64_t r = 0; r < o.num_rows; ++r) {
    Rng rng(o.seed, static_cast<std::uint64_t>(r));
    for (std::int64_t j = 0; j < o.dim; ++j) {
      values[r * o.dim + j] = rng.uniform(-o.init_scale, o.init_scale);
    }
  }
  return o.dtype == DType::f64 ? table : table.to(o.dtype);
}

}  // namespace

EmbeddingBag::EmbeddingBag(std::string name, const EmbeddingBagOptions& options)
    : name_(std::move(name)),
      options_(options),
      table_(name_ + ".weight", make_table(name_, options), ParamKind::sparse) {}

Tensor EmbeddingBag::forward(const SparseField& field) {
  const auto num_ids = static_cast<std::int64_t>(field.ids.size());
  AIACC_CHECK(
      !field.offsets.empty() && field.offsets.front() == 0 && field.offsets.back() == num_ids,
      "{}: bag offsets must run from 0 to the {} ids (got {} offsets)", name_, num_ids,
      field.offsets.size());
  for (std::size_t i = 0; i + 1 < field.offsets.size(); ++i) {
    AIACC_CHECK_LE(field.offsets[i], field.offsets[i + 1], "{}: bag offsets decrease at example {}",
                   name_, i);
  }
  rows_.resize(field.ids.size());
  for (std::size_t p = 0; p < field.ids.size(); ++p) rows_[p] = row_of(field.ids[p]);
  deduplicator_.run(rows_, dedup_);
  offsets_ = field.offsets;
  has_forward_ = true;

  const Tensor unique_rows = gather_rows();
  const kernels::EmbeddingBagGeometry g{static_cast<std::int64_t>(offsets_.size()) - 1, num_ids,
                                        unique_rows.dim(0), options_.dim};
  Tensor output = Tensor::empty({g.batch, g.dim}, options_.dtype);
  if (options_.dtype == DType::f64) {
    kernels::embedding_bag_forward<double>(g, options_.mode, unique_rows.data<double>(),
                                           dedup_.inverse.data(), offsets_.data(),
                                           output.data<double>());
  } else {
    kernels::embedding_bag_forward<float>(g, options_.mode, unique_rows.data<float>(),
                                          dedup_.inverse.data(), offsets_.data(),
                                          output.data<float>());
  }
  return output;
}

Tensor EmbeddingBag::gather_rows() const {
  const auto num_unique = static_cast<std::int64_t>(dedup_.unique_ids.size());
  Tensor unique_rows = Tensor::empty({num_unique, options_.dim}, options_.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(options_.dim) * dtype_size(options_.dtype);
  const auto* table = static_cast<const std::uint8_t*>(table_.value().raw_data());
  auto* out = static_cast<std::uint8_t*>(unique_rows.raw_data());
  const std::int64_t* rows = dedup_.unique_ids.data();
  util::parallel_for(std::int64_t{0}, num_unique,
                     static_cast<std::size_t>(num_unique) * row_bytes >= kMinParallelGatherBytes,
                     [&](std::int64_t u) {
                       std::memcpy(out + static_cast<std::size_t>(u) * row_bytes,
                                   table + static_cast<std::size_t>(rows[u]) * row_bytes, row_bytes);
                     });
  return unique_rows;
}

void EmbeddingBag::backward(const Tensor& grad_output) {
  AIACC_CHECK(has_forward_, "{}: backward() without a forward()", name_);
  const auto batch = static_cast<std::int64_t>(offsets_.size()) - 1;
  AIACC_CHECK(
      grad_output.shape() == Shape({batch, options_.dim}) && grad_output.dtype() == options_.dtype,
      "{}: expected grad_output [{}, {}] {}, got {} {}", name_, batch, options_.dim,
      dtype_name(options_.dtype), grad_output.shape().str(), dtype_name(grad_output.dtype()));
  SparseGrad& grad = table_.sparse_grad();
  const auto num_unique = static_cast<std::int64_t>(dedup_.unique_ids.size());
  grad.ids = dedup_.unique_ids;
  grad.rows = Tensor::empty({num_unique, options_.dim}, options_.dtype);
  const kernels::EmbeddingBagGeometry g{batch, static_cast<std::int64_t>(dedup_.inverse.size()),
                                        num_unique, options_.dim};
  if (options_.dtype == DType::f64) {
    kernels::embedding_bag_backward<double>(g, options_.mode, grad_output.data<double>(),
                                            dedup_.inverse.data(), offsets_.data(),
                                            grad.rows.data<double>());
  } else {
    kernels::embedding_bag_backward<float>(g, options_.mode, grad_output.data<float>(),
                                           dedup_.inverse.data(), offsets_.data(),
                                           grad.rows.data<float>());
  }
  table_.grad_ready();
}

}  // namespace aiacc::models
