// The synthetic_ctr dataset: per-example streams (seed, split, index) through the teacher, labels
// drawn once at construction, reference AUC from the teacher's probabilities.
#include "data/synthetic_ctr.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <numeric>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "data/detail/ctr_columns.h"
#include "core/util/exact_auc.h"

namespace aiacc::data {
namespace {

constexpr std::uint64_t kMaxTableFloats = std::uint64_t{1} << 26;  // 256 MiB of teacher tables

detail::CtrTeacherOptions teacher_options(const SyntheticCtr::Options& options, const DatasetContext& context) {
  check_split(context, "synthetic_ctr");
  const auto floats = static_cast<std::uint64_t>(options.num_categorical) *
                      static_cast<std::uint64_t>(options.vocabulary + 1) *
                      static_cast<std::uint64_t>(options.teacher_dim + 1);
  if (floats > kMaxTableFloats) {
    throw ConfigError(fmt::format("dataset synthetic_ctr: the teacher's tables would take {} MiB "
                                  "(num_categorical {} x vocabulary {} x (teacher_dim {} + 1) floats); "
                                  "at most {} MiB: lower vocabulary or teacher_dim",
                                  floats * 4 >> 20, options.num_categorical, options.vocabulary,
                                  options.teacher_dim, kMaxTableFloats * 4 >> 20));
  }
  detail::CtrTeacherOptions t;
  t.num_integer = static_cast<int>(options.num_integer);
  t.num_categorical = static_cast<int>(options.num_categorical);
  t.vocabulary = options.vocabulary;
  t.zipf_exponent = options.zipf_exponent;
  t.missing_rate = options.missing_rate;
  t.dim = static_cast<int>(options.teacher_dim);
  t.logit_scale = options.logit_scale;
  t.positive_rate = options.positive_rate;
  t.seed = context.seed;
  return t;
}

// Scratch for one example's features.
struct ExampleScratch {
  std::vector<float> integers;
  std::vector<std::int64_t> ids;
  std::vector<std::int32_t> ranks;
  explicit ExampleScratch(const detail::CtrTeacherOptions& o)
      : integers(static_cast<std::size_t>(o.num_integer)),
        ids(static_cast<std::size_t>(o.num_categorical)),
        ranks(static_cast<std::size_t>(o.num_categorical)) {}
};

}  // namespace

SyntheticCtr::SyntheticCtr(const Options& options, const DatasetContext& context)
    : options_(options),
      example_seed_(mix64(context.seed ^ (context.split == "train" ? 0x6374727472ull : 0x6374727465ull))),
      teacher_(teacher_options(options, context)) {
  // Every example once: its label (kept) and its probability (for the AUC, then dropped).
  labels_.resize(static_cast<std::size_t>(options.size));
  std::vector<double> probabilities(labels_.size());
  // Blocks of examples, each with its own scratch, so nothing can throw between the threads'
  // worksharing constructs (an exception may not leave an OpenMP region).
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (options.size + kBlock - 1) / kBlock;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(blocks));
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    try {
      ExampleScratch scratch(teacher_.options());
      for (std::int64_t i = b * kBlock; i < std::min(options.size, (b + 1) * kBlock); ++i) {
        Rng rng(example_seed_, static_cast<std::uint64_t>(i));
        teacher_.draw(rng, scratch.integers.data(), scratch.ids.data(), scratch.ranks.data());
        const double p = detail::CtrTeacher::sigmoid(teacher_.logit(scratch.integers.data(), scratch.ranks.data()));
        probabilities[static_cast<std::size_t>(i)] = p;
        labels_[static_cast<std::size_t>(i)] = rng.uniform() < p ? 1 : 0;
      }
    } catch (...) {
      errors[static_cast<std::size_t>(b)] = std::current_exception();
    }
  }
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  reference_auc_ = util::exact_auc(probabilities, labels_);
  log::get("data")->info("synthetic_ctr {}: {} examples, {:.1f}% positive, teacher AUC {:.4f}", context.split,
                         options.size, 100 * positive_fraction(), reference_auc_.value_or(0.0));
}

InputSpec SyntheticCtr::spec() const {
  std::vector<std::string> names;
  for (std::int64_t c = 1; c <= options_.num_categorical; ++c) names.push_back(fmt::format("C{}", c));
  return detail::ctr_spec(static_cast<int>(options_.num_integer), names);
}

double SyntheticCtr::teacher_probability(std::int64_t index) const {
  AIACC_CHECK(index >= 0 && index < options_.size, "example index {} of {}", index, options_.size);
  ExampleScratch scratch(teacher_.options());
  Rng rng(example_seed_, static_cast<std::uint64_t>(index));
  teacher_.draw(rng, scratch.integers.data(), scratch.ids.data(), scratch.ranks.data());
  return detail::CtrTeacher::sigmoid(teacher_.logit(scratch.integers.data(), scratch.ranks.data()));
}

double SyntheticCtr::positive_fraction() const {
  const auto positives = std::accumulate(labels_.begin(), labels_.end(), std::int64_t{0});
  return static_cast<double>(positives) / static_cast<double>(labels_.size());
}

void SyntheticCtr::read(std::span<const std::int64_t> indices, Batch& batch) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const auto ni = static_cast<std::size_t>(options_.num_integer);
  const auto nc = static_cast<std::size_t>(options_.num_categorical);
  detail::allocate_ctr_batch(n, static_cast<int>(ni), static_cast<int>(nc), batch);
  ExampleScratch scratch(teacher_.options());
  float* inputs = batch.inputs.data<float>();
  float* labels = batch.labels.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t index = indices[static_cast<std::size_t>(i)];
    AIACC_CHECK(index >= 0 && index < options_.size, "example index {} of {}", index, options_.size);
    Rng rng(example_seed_, static_cast<std::uint64_t>(index));
    teacher_.draw(rng, inputs + static_cast<std::size_t>(i) * ni, scratch.ids.data(), scratch.ranks.data());
    labels[i] = labels_[static_cast<std::size_t>(index)];
    for (std::size_t c = 0; c < nc; ++c) batch.sparse[c].ids[static_cast<std::size_t>(i)] = scratch.ids[c];
  }
}

AIACC_REGISTER_DATASET("synthetic_ctr", SyntheticCtr);

}  // namespace aiacc::data
