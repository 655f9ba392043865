// The known teacher behind synthetic_ctr: how an example's features are drawn and the model that
// gives its click probability. Internal to data/.
//
// Features (I = integer features, C = categorical fields, V = vocabulary per field):
//   integer i: missing with probability missing_rate, else a count floor(exp(mu_i + 1.25 n)),
//     n ~ N(0, 1), mu_i ~ U(0, 4) per feature (heavy-tailed like Criteo's counts); the example
//     holds z_i = log1p(count) (0 when missing), as the CTR batch contract says.
//   field c: missing with probability missing_rate, else a value of rank r ~ Zipf(s) over
//     [0, V) (p(r) ~ 1/(r+1)^s: a few values are frequent, most are rare); its id is a 32-bit
//     hash of (field, rank), so ids look like Criteo's hashed values.
// Teacher: a Wide&Deep network with random weights (dim = embedding size, H = kHidden ReLU
// units), reading z as the model reads it (models/wide_deep: log1p counts, no other scaling):
//   raw   = sum_c w_c[r_c] + sum_i u_i z_i                                       (wide part)
//         + sum_h v_h relu(sum_{c in P_h} W_hc . e_c[r_c] + sum_i a_hi z_i + b_h)  (deep part)
//   logit = logit_scale * (raw - mean) / std + bias
// with w, u, e, W, a, b, v random (from the seed) and a missing value using its field's own row.
// Each hidden unit reads the embeddings of one pair of fields P_h (distinct pairs drawn from the
// seed; an MLP whose first layer is sparse), so the deep part is a sum of learned two-field
// crosses, like the crossed features of real CTR logs. Why pairs: with every unit reading every
// field (a dense first layer), the interactions are spread thinly over all field pairs and no
// Wide&Deep learns them from millions of examples (it barely beats logistic regression), so the
// teacher's AUC would not be a reachable target; pairwise crosses are learnable, and logistic
// regression still falls well short of the teacher. mean and std of raw are measured on a
// calibration sample so logit_scale sets the spread (and with it the achievable AUC), and the
// bias is solved so the mean click probability is positive_rate.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/util/random.h"

namespace aiacc::data::detail {

struct CtrTeacherOptions {
  int num_integer = 13;
  int num_categorical = 26;
  std::int64_t vocabulary = 1000;
  double zipf_exponent = 1.05;
  double missing_rate = 0.05;
  int dim = 8;
  double logit_scale = 1.4;
  double positive_rate = 0.25;
  std::uint64_t seed = 0;
};

class CtrTeacher {
 public:
  static constexpr int kHidden = 8;
  static constexpr int kFieldsPerUnit = 2;

  // Draws the teacher's parameters from options.seed and calibrates it (~16k examples).
  // Memory: C * (V + 1) * (dim + 1) floats of tables.
  explicit CtrTeacher(const CtrTeacherOptions& options);

  // Draws one example's features from `rng`: integers [I] (transformed), ids [C] (-1 when
  // missing) and ranks [C] (the teacher's row: the value's rank, or V when missing).
  void draw(Rng& rng, float* integers, std::int64_t* ids, std::int32_t* ranks) const;

  // The teacher's logit for features from draw(). Thread-safe (const).
  double logit(const float* integers, const std::int32_t* ranks) const;

  static double sigmoid(double x);
  const CtrTeacherOptions& options() const { return options_; }

 private:
  double raw_score(const float* integers, const std::int32_t* ranks) const;

  CtrTeacherOptions options_;
  std::uint64_t id_salt_ = 0;
  std::vector<double> zipf_cdf_;     // [V], increasing to 1
  std::vector<float> integer_mu_;    // [I]
  std::vector<float> integer_w_;     // [I]
  std::vector<float> first_order_;   // [C, V + 1]
  std::vector<float> embeddings_;    // [C, V + 1, dim]
  // Per hidden unit: its fields (-1: none, with fewer than kFieldsPerUnit fields), their
  // weights [kFieldsPerUnit, dim], the integer weights [I], bias and output weight.
  std::array<std::array<int, kFieldsPerUnit>, kHidden> unit_fields_{};
  std::vector<float> unit_field_w_;  // [H, kFieldsPerUnit, dim]
  std::vector<float> unit_int_w_;    // [H, I]
  std::array<float, kHidden> hidden_b_{};
  std::array<float, kHidden> output_w_{};
  double raw_mean_ = 0, raw_std_ = 1, bias_ = 0;
};

}  // namespace aiacc::data::detail
