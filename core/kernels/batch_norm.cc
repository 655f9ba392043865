// Batch normalisation kernels (see batch_norm.h). Work is split into blocks of channels, one
// block per OpenMP task; inside a block the loops run n -> channel -> s so that [N, C] inputs
// (S = 1) read contiguous row segments instead of striding by C.
#include "core/kernels/batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {

// Below this many elements the OpenMP fork/join costs more than it saves.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 15;

// Runs fn(c_begin, c_end) over blocks of channels, in parallel when the tensor is large.
// fn must not throw (it runs inside an OpenMP region).
template <class Fn>
void for_channel_blocks(const BatchNormGeometry& g, Fn&& fn) {
  const std::int64_t channels = g.channels;
  const bool parallel = g.batch * channels * g.spatial >= kMinParallelElements;
  const std::int64_t threads = parallel ? omp_get_max_threads() : 1;
  // A few blocks per thread balance uneven channel costs without tiny blocks.
  const std::int64_t wanted_blocks = std::min<std::int64_t>(channels, 4 * threads);
  const std::int64_t block = (channels + wanted_blocks - 1) / wanted_blocks;
  const std::int64_t num_blocks = (channels + block - 1) / block;
  util::parallel_for_dynamic(std::int64_t{0}, num_blocks, std::int64_t{1}, parallel,
                             [&](std::int64_t b) { fn(b * block, std::min(channels, (b + 1) * block)); });
}

// Mean and sum of squared deviations (M2) of each channel in [c0, c1). Each [n, c] plane is
// contiguous: its mean and M2 come from two vectorised passes in T while it sits in L1 (the
// explicit SIMD reductions reassociate the sums, identically on any thread count), and the
// planes are merged in n order with Chan's update, which, like the two passes, avoids the
// cancellation of E[x^2] - E[x]^2.
template <class T>
void channel_moments(const BatchNormGeometry& g, const T* x, std::int64_t c0, std::int64_t c1,
                     std::vector<double>& mean, std::vector<double>& m2) {
  mean.assign(static_cast<std::size_t>(c1 - c0), 0.0);
  m2.assign(static_cast<std::size_t>(c1 - c0), 0.0);
  const std::int64_t s_count = g.spatial;
  for (std::int64_t n = 0; n < g.batch; ++n) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const T* xs = x + (n * g.channels + c) * s_count;
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t s = 0; s < s_count; ++s) sum += xs[s];
      const double plane_mean = static_cast<double>(sum) / static_cast<double>(s_count);
      const T centre = static_cast<T>(plane_mean);
      T plane_m2_t = 0;
#pragma omp simd reduction(+ : plane_m2_t)
      for (std::int64_t s = 0; s < s_count; ++s) {
        const T d = xs[s] - centre;
        plane_m2_t += d * d;
      }
      const auto plane_m2 = static_cast<double>(plane_m2_t);
      const auto k = static_cast<std::size_t>(c - c0);
      const double seen = static_cast<double>(n * s_count), total = seen + s_count;
      const double delta = plane_mean - mean[k];
      mean[k] += delta * (static_cast<double>(s_count) / total);
      m2[k] += plane_m2 + delta * delta * (seen * static_cast<double>(s_count) / total);
    }
  }
}

// y = x * scale[c] + shift[c] over channels [c0, c1); scale and shift are indexed by c - c0.
template <class T>
void affine_channels(const BatchNormGeometry& g, const T* x, std::int64_t c0, std::int64_t c1,
                     const std::vector<double>& scale, const std::vector<double>& shift, T* y) {
  for (std::int64_t n = 0; n < g.batch; ++n) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t base = (n * g.channels + c) * g.spatial;
      const auto a = static_cast<T>(scale[static_cast<std::size_t>(c - c0)]);
      const auto b = static_cast<T>(shift[static_cast<std::size_t>(c - c0)]);
      for (std::int64_t s = 0; s < g.spatial; ++s) y[base + s] = x[base + s] * a + b;
    }
  }
}

}  // namespace

void BatchNormGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && channels > 0 && spatial >= 0, "batch norm geometry N={} C={} S={}",
              batch, channels, spatial);
}

template <class T>
void batch_norm_moments(const BatchNormGeometry& g, const T* x, double* mean, double* m2) {
  g.validate();
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    std::vector<double> block_mean, block_m2;
    channel_moments(g, x, c0, c1, block_mean, block_m2);
    std::copy(block_mean.begin(), block_mean.end(), mean + c0);
    std::copy(block_m2.begin(), block_m2.end(), m2 + c0);
  });
}

template <class T>
void batch_norm_forward_from_moments(const BatchNormGeometry& g, const BatchNormOptions& options,
                                     double count, const double* mean, const double* m2, const T* x,
                                     const T* gamma, const T* beta, T* y, T* save_mean,
                                     T* save_inv_std, T* running_mean, T* running_var) {
  g.validate();
  AIACC_CHECK(count > 1, "batch norm training needs more than one value per channel ({} in all)", count);
  const double momentum = options.momentum;
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    const auto k_count = static_cast<std::size_t>(c1 - c0);
    std::vector<double> scale(k_count), shift(k_count);
    for (std::size_t k = 0; k < k_count; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k);
      const double biased_var = m2[c] / count;
      const double inv_std = 1.0 / std::sqrt(biased_var + options.eps);
      save_mean[c] = static_cast<T>(mean[c]);
      save_inv_std[c] = static_cast<T>(inv_std);
      if (running_mean != nullptr) {
        running_mean[c] = static_cast<T>((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
      }
      if (running_var != nullptr) {
        const double unbiased_var = m2[c] / (count - 1);
        running_var[c] =
            static_cast<T>((1.0 - momentum) * running_var[c] + momentum * unbiased_var);
      }
      scale[k] = static_cast<double>(gamma[c]) * inv_std;
      shift[k] = static_cast<double>(beta[c]) - mean[c] * scale[k];
    }
    affine_channels(g, x, c0, c1, scale, shift, y);
  });
}

template <class T>
void batch_norm_forward_train(const BatchNormGeometry& g, const BatchNormOptions& options,
                              const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                              T* save_inv_std, T* running_mean, T* running_var) {
  g.validate();
  const std::int64_t m = g.values_per_channel();
  AIACC_CHECK_GT(m, 1, "batch norm training needs more than one value per channel (N={}, S={})",
                 g.batch, g.spatial);
  std::vector<double> mean(static_cast<std::size_t>(g.channels)), m2(mean.size());
  batch_norm_moments(g, x, mean.data(), m2.data());
  batch_norm_forward_from_moments(g, options, static_cast<double>(m), mean.data(), m2.data(), x,
                                  gamma, beta, y, save_mean, save_inv_std, running_mean,
                                  running_var);
}

template <class T>
void batch_norm_forward_eval(const BatchNormGeometry& g, const BatchNormOptions& options,
                             const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, T* y) {
  g.validate();
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    const auto k_count = static_cast<std::size_t>(c1 - c0);
    std::vector<double> scale(k_count), shift(k_count);
    for (std::size_t k = 0; k < k_count; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k);
      const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + options.eps);
      scale[k] = static_cast<double>(gamma[c]) * inv_std;
      shift[k] = static_cast<double>(beta[c]) - static_cast<double>(running_mean[c]) * scale[k];
    }
    affine_channels(g, x, c0, c1, scale, shift, y);
  });
}

template <class T>
void batch_norm_backward_sums(const BatchNormGeometry& g, const T* x, const T* dy, const T* mean,
                              const T* inv_std, double* sum_dy, double* sum_dy_xhat) {
  g.validate();
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) sum_dy[c] = sum_dy_xhat[c] = 0.0;
    for (std::int64_t n = 0; n < g.batch; ++n) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t base = (n * g.channels + c) * g.spatial;
        // Per-plane sums in T (vectorised, L1-resident); planes accumulate in double. Two
        // loops of one reduction each: GCC 12 leaves a two-variable simd reduction scalar in
        // float, which made this the slowest batch-norm kernel.
        const T mu = mean[c];
        const T* dys = dy + base;
        const T* xs = x + base;
        const std::int64_t s_count = g.spatial;
        T a = 0, b = 0;
#pragma omp simd reduction(+ : a)
        for (std::int64_t s = 0; s < s_count; ++s) a += dys[s];
#pragma omp simd reduction(+ : b)
        for (std::int64_t s = 0; s < s_count; ++s) b += dys[s] * (xs[s] - mu);
        sum_dy[c] += static_cast<double>(a);
        sum_dy_xhat[c] += static_cast<double>(b) * static_cast<double>(inv_std[c]);
      }
    }
  });
}

template <class T>
void batch_norm_backward_input(const BatchNormGeometry& g, BatchNormStats stats, double count,
                               const T* x, const T* dy, const T* gamma, const T* mean,
                               const T* inv_std, const double* sum_dy, const double* sum_dy_xhat,
                               T* dx) {
  g.validate();
  const bool through_batch = stats == BatchNormStats::batch && count > 0;
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t n = 0; n < g.batch; ++n) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t base = (n * g.channels + c) * g.spatial;
        const double mu = mean[c], is = inv_std[c];
        const double gain = static_cast<double>(gamma[c]) * is;
        // With batch statistics, mean and variance depend on every x of the channel, which
        // subtracts the mean of dy and the projection of dy on xhat.
        const double mean_dy = through_batch ? sum_dy[c] / count : 0.0;
        const double mean_dy_xhat = through_batch ? sum_dy_xhat[c] / count : 0.0;
        // dx = gain * (dy - mean_dy - xhat * mean_dy_xhat), folded into one FMA chain in T.
        const auto dy_gain = static_cast<T>(gain);
        const auto x_gain = static_cast<T>(-gain * is * mean_dy_xhat);
        const auto offset = static_cast<T>(-gain * mean_dy);
        const auto mu_t = static_cast<T>(mu);
        for (std::int64_t s = 0; s < g.spatial; ++s) {
          dx[base + s] = dy_gain * dy[base + s] + x_gain * (x[base + s] - mu_t) + offset;
        }
      }
    }
  });
}

template <class T>
void batch_norm_backward(const BatchNormGeometry& g, BatchNormStats stats, const T* x, const T* dy,
                         const T* gamma, const T* mean, const T* inv_std, T* dx, T* dgamma,
                         T* dbeta) {
  g.validate();
  const auto channels = static_cast<std::size_t>(g.channels);
  const bool need_sums = dgamma != nullptr || dbeta != nullptr || stats == BatchNormStats::batch;
  std::vector<double> sum_dy(channels, 0.0), sum_dy_xhat(channels, 0.0);
  if (need_sums) batch_norm_backward_sums(g, x, dy, mean, inv_std, sum_dy.data(), sum_dy_xhat.data());
  for (std::size_t c = 0; c < channels; ++c) {
    if (dbeta != nullptr) dbeta[c] = static_cast<T>(sum_dy[c]);
    if (dgamma != nullptr) dgamma[c] = static_cast<T>(sum_dy_xhat[c]);
  }
  if (dx == nullptr) return;
  batch_norm_backward_input(g, stats, static_cast<double>(g.values_per_channel()), x, dy, gamma,
                            mean, inv_std, sum_dy.data(), sum_dy_xhat.data(), dx);
}

#define AIACC_INSTANTIATE_BATCH_NORM(T)                                                           \
  template void batch_norm_moments<T>(const BatchNormGeometry&, const T*, double*, double*);      \
  template void batch_norm_forward_from_moments<T>(const BatchNormGeometry&,                      \
                                                   const BatchNormOptions&, double, const double*, \
                                                   const double*, const T*, const T*, const T*, T*, \
                                                   T*, T*, T*, T*);                               \
  template void batch_norm_backward_sums<T>(const BatchNormGeometry&, const T*, const T*,         \
                                            const T*, const T*, double*, double*);                \
  template void batch_norm_backward_input<T>(const BatchNormGeometry&, BatchNormStats, double,    \
                                             const T*, const T*, const T*, const T*, const T*,    \
                                             const double*, const double*, T*);                   \
  template void batch_norm_forward_train<T>(const BatchNormGeometry&, const BatchNormOptions&,    \
                                            const T*, const T*, const T*, T*, T*, T*, T*, T*);    \
  template void batch_norm_forward_eval<T>(const BatchNormGeometry&, const BatchNormOptions&,     \
                                           const T*, const T*, const T*, const T*, const T*, T*); \
  template void batch_norm_backward<T>(const BatchNormGeometry&, BatchNormStats, const T*,        \
                                       const T*, const T*, const T*, const T*, T*, T*, T*);
AIACC_INSTANTIATE_BATCH_NORM(float)
AIACC_INSTANTIATE_BATCH_NORM(double)
#undef AIACC_INSTANTIATE_BATCH_NORM

}  // namespace aiacc::kernels
