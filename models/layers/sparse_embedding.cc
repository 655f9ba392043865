// SparseEmbedding: de-duplication, the store pull and sparse-gradient bookkeeping around the
// storage-independent kernels in core/kernels/embedding_bag.
#include "models/layers/sparse_embedding.h"

#include "core/check.h"

namespace aiacc::models {

SparseEmbedding::SparseEmbedding(std::shared_ptr<EmbeddingStore> store, kernels::BagMode mode,
                                 DType dtype)
    : store_(std::move(store)),
      mode_(mode),
      dtype_(dtype),
      dim_(store_ ? store_->spec().dim : 0),
      param_(store_ ? store_->spec().name : std::string(), Tensor::empty(Shape{0, dim_}, dtype),
             ParamKind::sparse) {
  AIACC_CHECK(store_ != nullptr, "sparse embedding without an embedding store");
  AIACC_CHECK(dtype == DType::f32 || dtype == DType::f64, "{}: embedding dtype {} (f32 or f64)",
              param_.name(), dtype_name(dtype));
  AIACC_CHECK_GT(dim_, 0, "{}: embedding dim", param_.name());
}

void SparseEmbedding::pull(const SparseField& field) {
  const auto num_ids = static_cast<std::int64_t>(field.ids.size());
  const std::string& name = param_.name();
  AIACC_CHECK(!field.offsets.empty() && field.offsets.front() == 0 && field.offsets.back() == num_ids,
              "{}: bag offsets must run from 0 to the {} ids (got {} offsets)", name, num_ids,
              field.offsets.size());
  deduplicator_.run(field.ids, dedup_);
  offsets_ = field.offsets;
  has_forward_ = true;

  // The one pull of this table for the batch: straight into the parameter's value in f32;
  // through a float buffer and a conversion in f64.
  Tensor rows = Tensor::empty(Shape{num_unique(), dim_}, DType::f32);
  store_->pull(dedup_.unique_ids, rows.data<float>());
  param_.value() = dtype_ == DType::f32 ? rows : rows.to(dtype_);
}

Tensor SparseEmbedding::forward(const SparseField& field) {
  pull(field);
  const auto num_ids = static_cast<std::int64_t>(field.ids.size());
  const std::int64_t num_unique = this->num_unique();
  const kernels::EmbeddingBagGeometry g{static_cast<std::int64_t>(offsets_.size()) - 1, num_ids,
                                        num_unique, dim_};
  Tensor output = Tensor::empty(Shape{g.batch, dim_}, dtype_);
  if (dtype_ == DType::f64) {
    kernels::embedding_bag_forward<double>(g, mode_, param_.value().data<double>(),
                                           dedup_.inverse.data(), offsets_.data(),
                                           output.data<double>());
  } else {
    kernels::embedding_bag_forward<float>(g, mode_, param_.value().data<float>(),
                                          dedup_.inverse.data(), offsets_.data(),
                                          output.data<float>());
  }
  return output;
}

void SparseEmbedding::backward(const Tensor& grad_output) {
  const std::string& name = param_.name();
  AIACC_CHECK(has_forward_, "{}: backward() without a forward()", name);
  const auto batch = static_cast<std::int64_t>(offsets_.size()) - 1;
  AIACC_CHECK(grad_output.shape() == Shape({batch, dim_}) && grad_output.dtype() == dtype_,
              "{}: expected grad_output [{}, {}] {}, got {} {}", name, batch, dim_,
              dtype_name(dtype_), grad_output.shape().str(), dtype_name(grad_output.dtype()));
  Tensor rows = Tensor::empty(Shape{num_unique(), dim_}, dtype_);
  const kernels::EmbeddingBagGeometry g{batch, static_cast<std::int64_t>(dedup_.inverse.size()),
                                        num_unique(), dim_};
  if (dtype_ == DType::f64) {
    kernels::embedding_bag_backward<double>(g, mode_, grad_output.data<double>(),
                                            dedup_.inverse.data(), offsets_.data(),
                                            rows.data<double>());
  } else {
    kernels::embedding_bag_backward<float>(g, mode_, grad_output.data<float>(),
                                           dedup_.inverse.data(), offsets_.data(),
                                           rows.data<float>());
  }
  set_gradient_rows(std::move(rows));
}

void SparseEmbedding::set_gradient_rows(Tensor rows) {
  const std::string& name = param_.name();
  AIACC_CHECK(has_forward_, "{}: gradient rows without a pull()", name);
  AIACC_CHECK(rows.device().is_cpu() && rows.shape() == Shape({num_unique(), dim_}) &&
                  (rows.dtype() == dtype_ || rows.dtype() == DType::f32),
              "{}: expected gradient rows [{}, {}] on the host, got {} {} on {}", name, num_unique(), dim_,
              rows.shape().str(), dtype_name(rows.dtype()), rows.device().str());
  SparseGrad& grad = param_.sparse_grad();
  grad.ids = dedup_.unique_ids;
  grad.rows = rows.dtype() == dtype_ ? std::move(rows) : rows.to(dtype_);
  param_.grad_ready();
}

}  // namespace aiacc::models
