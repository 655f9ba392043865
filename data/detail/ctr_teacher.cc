// The synthetic CTR teacher: parameter draws, feature sampling and the logit; calibration of
// its scale and bias on a sample drawn from a stream no split uses.
#include "data/detail/ctr_teacher.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.h"
#include "data/detail/ctr_columns.h"

namespace aiacc::data::detail {
namespace {

constexpr std::uint64_t kParameterStream = 0x7465616368ull;    // "teach"
constexpr std::uint64_t kCalibrationStream = 0x63616c6962ull;  // "calib"
constexpr int kCalibrationExamples = 16384;
// The integer features enter as the model sees them (log1p counts, up to ~10, rms ~2.7): their
// weights are small so the integer terms stay below the fields' O(1) contributions.
constexpr double kIntegerWideStd = 0.3;   // over sqrt(I + 1)
constexpr double kIntegerUnitStd = 0.1;   // over sqrt(I)

void fill_normal(Rng& rng, std::vector<float>& values, double stddev) {
  for (float& v : values) v = static_cast<float>(stddev * rng.normal());
}

}  // namespace

double CtrTeacher::sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

CtrTeacher::CtrTeacher(const CtrTeacherOptions& options) : options_(options) {
  AIACC_CHECK(options.vocabulary >= 1 && options.num_categorical >= 0 && options.num_integer >= 0 &&
              options.dim >= 1);
  const auto ni = static_cast<std::size_t>(options.num_integer);
  const auto nc = static_cast<std::size_t>(options.num_categorical);
  const auto rows = static_cast<std::size_t>(options.vocabulary) + 1;  // + the missing row
  const auto dim = static_cast<std::size_t>(options.dim);

  zipf_cdf_.resize(static_cast<std::size_t>(options.vocabulary));
  double total = 0;
  for (std::size_t r = 0; r < zipf_cdf_.size(); ++r) {
    total += std::pow(static_cast<double>(r + 1), -options.zipf_exponent);
    zipf_cdf_[r] = total;
  }
  for (double& c : zipf_cdf_) c /= total;

  Rng rng(options.seed, kParameterStream);
  id_salt_ = rng.next();
  integer_mu_.resize(ni);
  for (float& mu : integer_mu_) mu = static_cast<float>(rng.uniform(0.0, 4.0));
  // Variance budget: the first-order terms, the integer terms and each unit's pre-activation
  // are O(1) before raw is standardised; the deep part carries most of raw's variance.
  integer_w_.resize(ni);
  fill_normal(rng, integer_w_, kIntegerWideStd / std::sqrt(static_cast<double>(ni + 1)));
  first_order_.resize(nc * rows);
  fill_normal(rng, first_order_, 1.0 / std::sqrt(static_cast<double>(nc + 1)));
  embeddings_.resize(nc * rows * dim);
  fill_normal(rng, embeddings_, 1.0);
  // Distinct field pairs while there are enough of them (a repeat would only strengthen a cross).
  const std::size_t distinct_pairs = nc * (nc - (nc > 0 ? 1 : 0)) / 2;
  for (std::size_t h = 0; h < kHidden; ++h) {
    std::array<int, kFieldsPerUnit>& fields = unit_fields_[h];
    fields = {-1, -1};
    if (nc == 1) fields[0] = 0;
    if (nc < 2) continue;
    for (;;) {
      const auto a = static_cast<int>(rng.below(nc));
      auto b = static_cast<int>(rng.below(nc - 1));
      if (b >= a) ++b;
      fields = {std::min(a, b), std::max(a, b)};
      bool repeated = false;
      for (std::size_t k = 0; k < h; ++k) repeated = repeated || unit_fields_[k] == fields;
      if (!repeated || h >= distinct_pairs) break;
    }
  }
  unit_field_w_.resize(kHidden * kFieldsPerUnit * dim);
  fill_normal(rng, unit_field_w_, 1.0 / std::sqrt(static_cast<double>(dim)));  // W . e ~ N(0, 1)
  unit_int_w_.resize(kHidden * ni);
  fill_normal(rng, unit_int_w_, kIntegerUnitStd / std::sqrt(static_cast<double>(std::max<std::size_t>(ni, 1))));
  for (float& b : hidden_b_) b = static_cast<float>(0.5 * rng.normal());
  for (float& v : output_w_) v = static_cast<float>(2.0 / std::sqrt(double{kHidden}) * rng.normal());

  // Standardise raw on a calibration sample, then solve the bias by bisection: the mean
  // probability increases monotonically with it.
  std::vector<double> raw(kCalibrationExamples);
  std::vector<float> integers(ni);
  std::vector<std::int64_t> ids(nc);
  std::vector<std::int32_t> ranks(nc);
  double sum = 0, sum_squares = 0;
  for (int k = 0; k < kCalibrationExamples; ++k) {
    Rng sample(options.seed, kCalibrationStream + static_cast<std::uint64_t>(k));
    draw(sample, integers.data(), ids.data(), ranks.data());
    raw[static_cast<std::size_t>(k)] = raw_score(integers.data(), ranks.data());
    sum += raw[static_cast<std::size_t>(k)];
    sum_squares += raw[static_cast<std::size_t>(k)] * raw[static_cast<std::size_t>(k)];
  }
  raw_mean_ = sum / kCalibrationExamples;
  const double variance = sum_squares / kCalibrationExamples - raw_mean_ * raw_mean_;
  raw_std_ = variance > 1e-12 ? std::sqrt(variance) : 1.0;
  double low = -30, high = 30;
  for (int step = 0; step < 60; ++step) {
    const double mid = 0.5 * (low + high);
    double mean_p = 0;
    for (double r : raw) mean_p += sigmoid(options.logit_scale * (r - raw_mean_) / raw_std_ + mid);
    (mean_p / kCalibrationExamples < options.positive_rate ? low : high) = mid;
  }
  bias_ = 0.5 * (low + high);
}

void CtrTeacher::draw(Rng& rng, float* integers, std::int64_t* ids, std::int32_t* ranks) const {
  for (int i = 0; i < options_.num_integer; ++i) {
    const bool missing = rng.uniform() < options_.missing_rate;
    const double normal = rng.normal();  // drawn either way: the stream layout stays fixed
    std::int64_t count = 0;
    if (!missing) count = static_cast<std::int64_t>(std::floor(std::exp(integer_mu_[static_cast<std::size_t>(i)] + 1.25 * normal)));
    integers[i] = transform_integer(count);
  }
  for (int c = 0; c < options_.num_categorical; ++c) {
    const bool missing = rng.uniform() < options_.missing_rate;
    const double u = rng.uniform();
    if (missing) {
      ranks[c] = static_cast<std::int32_t>(options_.vocabulary);
      ids[c] = -1;
      continue;
    }
    const auto rank = std::min<std::size_t>(
        static_cast<std::size_t>(std::upper_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u) - zipf_cdf_.begin()),
        zipf_cdf_.size() - 1);
    ranks[c] = static_cast<std::int32_t>(rank);
    ids[c] = static_cast<std::int64_t>(mix64(id_salt_ ^ (static_cast<std::uint64_t>(c) << 40) ^ rank) & 0xffffffffull);
  }
}

double CtrTeacher::raw_score(const float* integers, const std::int32_t* ranks) const {
  const auto ni = static_cast<std::size_t>(options_.num_integer);
  const auto nc = static_cast<std::size_t>(options_.num_categorical);
  const auto rows = static_cast<std::size_t>(options_.vocabulary) + 1;
  const auto dim = static_cast<std::size_t>(options_.dim);
  double score = 0;
  for (std::size_t c = 0; c < nc; ++c) score += first_order_[c * rows + static_cast<std::size_t>(ranks[c])];
  for (std::size_t i = 0; i < ni; ++i) score += double{integer_w_[i]} * integers[i];
  for (std::size_t h = 0; h < kHidden; ++h) {
    double pre = hidden_b_[h];
    for (std::size_t k = 0; k < kFieldsPerUnit; ++k) {
      const int field = unit_fields_[h][k];
      if (field < 0) continue;
      const auto c = static_cast<std::size_t>(field);
      const float* e = embeddings_.data() + (c * rows + static_cast<std::size_t>(ranks[c])) * dim;
      const float* w = unit_field_w_.data() + (h * kFieldsPerUnit + k) * dim;
      for (std::size_t d = 0; d < dim; ++d) pre += double{w[d]} * e[d];
    }
    const float* a = unit_int_w_.data() + h * ni;
    for (std::size_t i = 0; i < ni; ++i) pre += double{a[i]} * integers[i];
    score += output_w_[h] * std::max(0.0, pre);
  }
  return score;
}

double CtrTeacher::logit(const float* integers, const std::int32_t* ranks) const {
  return options_.logit_scale * (raw_score(integers, ranks) - raw_mean_) / raw_std_ + bias_;
}

}  // namespace aiacc::data::detail
