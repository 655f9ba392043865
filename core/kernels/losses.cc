// Loss kernels (see losses.h). Labels are validated serially first, so the parallel loops
// never need to throw (an exception must not leave an OpenMP region).
#include "core/kernels/losses.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {

// Below this many logits the OpenMP fork/join costs more than it saves.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 15;

}  // namespace

template <class T>
double softmax_cross_entropy(std::int64_t batch, std::int64_t classes, const T* logits,
                             const std::int64_t* labels, double label_smoothing, T* dlogits) {
  AIACC_CHECK(batch >= 1 && classes >= 1, "softmax cross-entropy on [{}, {}] logits", batch,
              classes);
  AIACC_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "label smoothing {} outside [0, 1]",
              label_smoothing);
  for (std::int64_t i = 0; i < batch; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw DataError(
          fmt::format("softmax cross-entropy: example {} has label {}, expected a "
                      "class id in [0, {})",
                      i, labels[i], classes));
    }
  }
  const double inv_batch = 1.0 / static_cast<double>(batch);
  const double smooth_each = label_smoothing / static_cast<double>(classes);
  const double on_target = 1.0 - label_smoothing;
  const bool parallel = batch * classes >= kMinParallelElements;
  const double total = util::parallel_sum(std::int64_t{0}, batch, parallel, [&](std::int64_t i) {
    const T* x = logits + i * classes;
    // Subtracting the row maximum keeps every exp() <= 1: no overflow for large logits.
    const double max_logit = *std::max_element(x, x + classes);
    double sum_exp = 0.0, sum_logits = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      sum_exp += std::exp(static_cast<double>(x[c]) - max_logit);
      sum_logits += static_cast<double>(x[c]);
    }
    const double log_sum_exp = max_logit + std::log(sum_exp);
    const std::int64_t y = labels[i];
    if (dlogits != nullptr) {
      T* d = dlogits + i * classes;
      for (std::int64_t c = 0; c < classes; ++c) {
        const double q = smooth_each + (c == y ? on_target : 0.0);
        d[c] = static_cast<T>((std::exp(static_cast<double>(x[c]) - log_sum_exp) - q) * inv_batch);
      }
    }
    // -sum_c q_c (x_c - lse) = lse - (1 - s) x_y - s/C sum_c x_c, since sum_c q_c = 1.
    return log_sum_exp - on_target * static_cast<double>(x[y]) - smooth_each * sum_logits;
  });
  return total * inv_batch;
}

template <class T>
double binary_cross_entropy_with_logits(std::int64_t batch, const T* logits, const T* targets,
                                        T* dlogits) {
  AIACC_CHECK_GE(batch, 1, "binary cross-entropy on an empty batch");
  for (std::int64_t i = 0; i < batch; ++i) {
    if (!(targets[i] >= T(0) && targets[i] <= T(1))) {  // also rejects NaN
      throw DataError(
          fmt::format("binary cross-entropy: example {} has target {}, expected a "
                      "value in [0, 1]",
                      i, static_cast<double>(targets[i])));
    }
  }
  const double inv_batch = 1.0 / static_cast<double>(batch);
  const double total = util::parallel_sum(std::int64_t{0}, batch, batch >= kMinParallelElements, [&](std::int64_t i) {
    const double x = logits[i], t = targets[i];
    // exp(-|x|) <= 1 never overflows, and log1p keeps precision when it is tiny.
    const double e = std::exp(-std::abs(x));
    if (dlogits != nullptr) {
      const double sigmoid = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      dlogits[i] = static_cast<T>((sigmoid - t) * inv_batch);
    }
    return std::max(x, 0.0) - x * t + std::log1p(e);
  });
  return total * inv_batch;
}

#define AIACC_INSTANTIATE_LOSSES(T)                                              \
  template double softmax_cross_entropy<T>(std::int64_t, std::int64_t, const T*, \
                                           const std::int64_t*, double, T*);     \
  template double binary_cross_entropy_with_logits<T>(std::int64_t, const T*, const T*, T*);
AIACC_INSTANTIATE_LOSSES(float)
AIACC_INSTANTIATE_LOSSES(double)
#undef AIACC_INSTANTIATE_LOSSES

}  // namespace aiacc::kernels
