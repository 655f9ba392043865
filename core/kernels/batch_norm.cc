// Batch normalisation kernels (see batch_norm.h). Work is split into blocks of channels, one
// block per OpenMP task; inside a block the loops run n -> channel -> s so that [N, C] inputs
// (S = 1) read contiguous row segments instead of striding by C.
#include "core/kernels/batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

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
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (std::int64_t b = 0; b < num_blocks; ++b) {
    fn(b * block, std::min(channels, (b + 1) * block));
  }
}

// sums[k] = sum over (n, s) of f(x value, channel c0 + k), for channels [c0, c1).
template <class T, class F>
void channel_sums(const BatchNormGeometry& g, const T* x, std::int64_t c0, std::int64_t c1,
                  std::vector<double>& sums, F&& f) {
  sums.assign(static_cast<std::size_t>(c1 - c0), 0.0);
  for (std::int64_t n = 0; n < g.batch; ++n) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const T* xs = x + (n * g.channels + c) * g.spatial;
      double acc = 0.0;
      for (std::int64_t s = 0; s < g.spatial; ++s) acc += f(static_cast<double>(xs[s]), c);
      sums[static_cast<std::size_t>(c - c0)] += acc;
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
      const double a = scale[static_cast<std::size_t>(c - c0)];
      const double b = shift[static_cast<std::size_t>(c - c0)];
      for (std::int64_t s = 0; s < g.spatial; ++s) {
        y[base + s] = static_cast<T>(static_cast<double>(x[base + s]) * a + b);
      }
    }
  }
}

}  // namespace

void BatchNormGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && channels > 0 && spatial >= 0, "batch norm geometry N={} C={} S={}",
              batch, channels, spatial);
}

template <class T>
void batch_norm_forward_train(const BatchNormGeometry& g, const BatchNormOptions& options,
                              const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                              T* save_inv_std, T* running_mean, T* running_var) {
  g.validate();
  const std::int64_t m = g.values_per_channel();
  AIACC_CHECK_GT(m, 1, "batch norm training needs more than one value per channel (N={}, S={})",
                 g.batch, g.spatial);
  const double momentum = options.momentum;
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    const auto k_count = static_cast<std::size_t>(c1 - c0);
    std::vector<double> mean, centred_sq;
    channel_sums(g, x, c0, c1, mean, [](double v, std::int64_t) { return v; });
    for (double& v : mean) v /= static_cast<double>(m);
    // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
    channel_sums(g, x, c0, c1, centred_sq, [&](double v, std::int64_t c) {
      const double d = v - mean[static_cast<std::size_t>(c - c0)];
      return d * d;
    });
    std::vector<double> scale(k_count), shift(k_count);
    for (std::size_t k = 0; k < k_count; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k);
      const double biased_var = centred_sq[k] / static_cast<double>(m);
      const double inv_std = 1.0 / std::sqrt(biased_var + options.eps);
      save_mean[c] = static_cast<T>(mean[k]);
      save_inv_std[c] = static_cast<T>(inv_std);
      if (running_mean != nullptr) {
        running_mean[c] = static_cast<T>((1.0 - momentum) * running_mean[c] + momentum * mean[k]);
      }
      if (running_var != nullptr) {
        const double unbiased_var = centred_sq[k] / static_cast<double>(m - 1);
        running_var[c] =
            static_cast<T>((1.0 - momentum) * running_var[c] + momentum * unbiased_var);
      }
      scale[k] = static_cast<double>(gamma[c]) * inv_std;
      shift[k] = static_cast<double>(beta[c]) - mean[k] * scale[k];
    }
    affine_channels(g, x, c0, c1, scale, shift, y);
  });
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
void batch_norm_backward(const BatchNormGeometry& g, BatchNormStats stats, const T* x, const T* dy,
                         const T* gamma, const T* mean, const T* inv_std, T* dx, T* dgamma,
                         T* dbeta) {
  g.validate();
  const std::int64_t m = g.values_per_channel();
  const bool need_sums = dgamma != nullptr || dbeta != nullptr || stats == BatchNormStats::batch;
  for_channel_blocks(g, [&](std::int64_t c0, std::int64_t c1) {
    const auto k_count = static_cast<std::size_t>(c1 - c0);
    std::vector<double> sum_dy(k_count, 0.0), sum_dy_xhat(k_count, 0.0);
    if (need_sums) {
      for (std::int64_t n = 0; n < g.batch; ++n) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::int64_t base = (n * g.channels + c) * g.spatial;
          const double mu = mean[c], is = inv_std[c];
          double a = 0.0, b = 0.0;
          for (std::int64_t s = 0; s < g.spatial; ++s) {
            const double d = dy[base + s];
            a += d;
            b += d * (static_cast<double>(x[base + s]) - mu) * is;
          }
          sum_dy[static_cast<std::size_t>(c - c0)] += a;
          sum_dy_xhat[static_cast<std::size_t>(c - c0)] += b;
        }
      }
    }
    for (std::size_t k = 0; k < k_count; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k);
      if (dbeta != nullptr) dbeta[c] = static_cast<T>(sum_dy[k]);
      if (dgamma != nullptr) dgamma[c] = static_cast<T>(sum_dy_xhat[k]);
    }
    if (dx == nullptr) return;
    const bool through_batch = stats == BatchNormStats::batch && m > 0;
    for (std::int64_t n = 0; n < g.batch; ++n) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const auto k = static_cast<std::size_t>(c - c0);
        const std::int64_t base = (n * g.channels + c) * g.spatial;
        const double mu = mean[c], is = inv_std[c];
        const double gain = static_cast<double>(gamma[c]) * is;
        // With batch statistics, mean and variance depend on every x of the channel, which
        // subtracts the mean of dy and the projection of dy on xhat.
        const double mean_dy = through_batch ? sum_dy[k] / static_cast<double>(m) : 0.0;
        const double mean_dy_xhat = through_batch ? sum_dy_xhat[k] / static_cast<double>(m) : 0.0;
        for (std::int64_t s = 0; s < g.spatial; ++s) {
          const double xhat = (static_cast<double>(x[base + s]) - mu) * is;
          dx[base + s] = static_cast<T>(gain * (dy[base + s] - mean_dy - xhat * mean_dy_xhat));
        }
      }
    }
  });
}

#define AIACC_INSTANTIATE_BATCH_NORM(T)                                                           \
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
