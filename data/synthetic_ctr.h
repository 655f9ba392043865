// `synthetic_ctr`: click-through data sampled from a known teacher model (data/detail/ctr_teacher.h:
// Zipf-distributed categorical values, heavy-tailed counts, and a random Wide&Deep network:
// first-order weights + ReLU units that each cross two fields' embeddings), labels ~
// Bernoulli(sigmoid(teacher logit)). Because the teacher's probabilities are known, so is the
// best achievable AUC: reference_auc() returns the teacher's exact AUC on this split's labels
// (defaults: ~0.81, ~25% positives).
//
// Batches follow the CTR contract of criteo_tsv (inputs [N, I] f32 = log1p(count), labels [N] f32,
// one SparseField per field with one id each, -1 = missing); fields are named C1..Cn.
// The teacher depends on the seed only, so the train and test splits share it; each example is
// generated from (seed, split, index), so read() is cheap to repeat and thread-safe. Construction
// draws every example of the split once (parallel) to store its label (1 byte per example) and
// compute the reference AUC.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/detail/ctr_teacher.h"

namespace aiacc::data {

class SyntheticCtr final : public Dataset {
 public:
  struct Options {
    std::int64_t num_integer = 13;
    std::int64_t num_categorical = 26;
    std::int64_t vocabulary = 1000;
    double zipf_exponent = 1.05;
    double missing_rate = 0.05;
    std::int64_t size = 100000;
    std::int64_t teacher_dim = 8;
    double logit_scale = 1.4;
    double positive_rate = 0.25;

    template <class V>
    void visit(V& v) {
      v.field("num_integer", num_integer, "integer (count) features per example",
              config::in_range<std::int64_t>(0, 1000));
      v.field("num_categorical", num_categorical, "categorical fields per example",
              config::in_range<std::int64_t>(1, 1000));
      v.field("vocabulary", vocabulary, "distinct values per categorical field",
              config::in_range<std::int64_t>(1, 10000000));
      v.field("zipf_exponent", zipf_exponent, "value frequencies follow 1/(rank+1)^s; larger s: a few "
              "values dominate", config::in_range(0.0, 4.0));
      v.field("missing_rate", missing_rate, "probability that a feature value is missing",
              config::in_range(0.0, 0.9));
      v.field("size", size, "examples in the split", config::in_range<std::int64_t>(1, std::int64_t{1} << 32));
      v.field("teacher_dim", teacher_dim, "embedding size of the teacher model",
              config::in_range<std::int64_t>(1, 256));
      v.field("logit_scale", logit_scale, "std of the teacher's logit: larger gives cleaner labels "
              "and a higher achievable AUC (1.4: ~0.81)", config::in_range(0.01, 20.0));
      v.field("positive_rate", positive_rate, "mean click probability the teacher is calibrated to",
              config::in_range(0.01, 0.99));
    }
  };

  // Builds the teacher from context.seed and draws every label of the split. ConfigError for an
  // unknown split or teacher tables above 256 MiB (num_categorical x vocabulary x teacher_dim).
  SyntheticCtr(const Options& options, const DatasetContext& context);

  InputSpec spec() const override;
  std::int64_t size() const override { return options_.size; }
  // Thread-safe (the teacher and labels are immutable).
  void read(std::span<const std::int64_t> indices, Batch& batch) override;
  std::optional<double> reference_auc() const override { return reference_auc_; }

  // The teacher's click probability and the sampled label of example `index`.
  double teacher_probability(std::int64_t index) const;
  std::uint8_t label(std::int64_t index) const { return labels_.at(static_cast<std::size_t>(index)); }
  // Share of positive labels in this split.
  double positive_fraction() const;
  // The teacher (the same for both splits of one seed).
  const detail::CtrTeacher& teacher() const { return teacher_; }

 private:
  Options options_;
  std::uint64_t example_seed_;
  detail::CtrTeacher teacher_;
  std::vector<std::uint8_t> labels_;  // [size]
  std::optional<double> reference_auc_;
};

}  // namespace aiacc::data
