// Pooling kernels: straightforward window loops, parallel over (image, channel) planes.
#include "core/kernels/pooling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {

void Pool2dGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && channels > 0 && height > 0 && width > 0 && kernel_h > 0 &&
                  kernel_w > 0 && stride_h > 0 && stride_w > 0,
              "invalid pooling geometry {}", str());
  AIACC_CHECK(pad_h >= 0 && pad_w >= 0 && 2 * pad_h <= kernel_h && 2 * pad_w <= kernel_w,
              "pooling padding must be between 0 and half the window: {}", str());
  AIACC_CHECK(height + 2 * pad_h >= kernel_h && width + 2 * pad_w >= kernel_w,
              "pooling window is larger than the padded input: {}", str());
}

std::string Pool2dGeometry::str() const {
  return fmt::format("N={} C={} H={} W={} K={}x{} s={}x{} p={}x{}", batch, channels, height, width,
                     kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
}

namespace {

// Parallel loops over planes only pay off once there is enough work to split.
constexpr std::int64_t kParallelMinElements = 1 << 14;

// The window of output (oh, ow) clipped to the real input: rows [h0, h1), columns [w0, w1).
struct Window {
  std::int64_t h0, h1, w0, w1;
};
Window window_at(const Pool2dGeometry& g, std::int64_t oh, std::int64_t ow) {
  const std::int64_t hs = oh * g.stride_h - g.pad_h, ws = ow * g.stride_w - g.pad_w;
  return {std::max<std::int64_t>(hs, 0), std::min(hs + g.kernel_h, g.height),
          std::max<std::int64_t>(ws, 0), std::min(ws + g.kernel_w, g.width)};
}

}  // namespace

template <class T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, std::int64_t* argmax) {
  g.validate();
  const std::int64_t planes = g.batch * g.channels, in_plane = g.height * g.width;
  const std::int64_t out_h = g.out_height(), out_w = g.out_width(), out_plane = out_h * out_w;
  util::parallel_for(std::int64_t{0}, planes, planes * in_plane >= kParallelMinElements, [&](std::int64_t plane) {
    const T* in = x + plane * in_plane;
    for (std::int64_t oh = 0; oh < out_h; ++oh) {
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const Window win = window_at(g, oh, ow);
        // validate() guarantees a non-empty window, so the first element seeds the maximum.
        std::int64_t best_index = win.h0 * g.width + win.w0;
        T best = in[best_index];
        for (std::int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (std::int64_t iw = win.w0; iw < win.w1; ++iw) {
            const T v = in[ih * g.width + iw];
            // Strictly greater keeps the first of equal maxima; a NaN wins once and stays.
            if (v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              best_index = ih * g.width + iw;
            }
          }
        }
        const std::int64_t out = plane * out_plane + oh * out_w + ow;
        y[out] = best;
        argmax[out] = best_index;
      }
    }
  });
}

template <class T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const std::int64_t* argmax, T* dx) {
  g.validate();
  const std::int64_t planes = g.batch * g.channels, in_plane = g.height * g.width;
  const std::int64_t out_plane = g.out_height() * g.out_width();
  // Each thread owns whole planes, so the scatter-add into dx has no races.
  util::parallel_for(std::int64_t{0}, planes, planes * in_plane >= kParallelMinElements, [&](std::int64_t plane) {
    T* grad_in = dx + plane * in_plane;
    std::fill(grad_in, grad_in + in_plane, T(0));
    const T* grad_out = dy + plane * out_plane;
    const std::int64_t* index = argmax + plane * out_plane;
    for (std::int64_t i = 0; i < out_plane; ++i) grad_in[index[i]] += grad_out[i];
  });
}

template <class T>
void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y) {
  g.validate();
  const std::int64_t planes = g.batch * g.channels, in_plane = g.height * g.width;
  const std::int64_t out_h = g.out_height(), out_w = g.out_width(), out_plane = out_h * out_w;
  // Floor mode with pad <= kernel/2 never clips a window at the padded border, so the
  // count_include_pad divisor is always the full window size.
  const T inv_area = T(1) / static_cast<T>(g.kernel_h * g.kernel_w);
  util::parallel_for(std::int64_t{0}, planes, planes * in_plane >= kParallelMinElements, [&](std::int64_t plane) {
    const T* in = x + plane * in_plane;
    for (std::int64_t oh = 0; oh < out_h; ++oh) {
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const Window win = window_at(g, oh, ow);
        T sum = 0;
        for (std::int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (std::int64_t iw = win.w0; iw < win.w1; ++iw) sum += in[ih * g.width + iw];
        }
        y[plane * out_plane + oh * out_w + ow] = sum * inv_area;
      }
    }
  });
}

template <class T>
void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
  g.validate();
  const std::int64_t planes = g.batch * g.channels, in_plane = g.height * g.width;
  const std::int64_t out_h = g.out_height(), out_w = g.out_width(), out_plane = out_h * out_w;
  const T inv_area = T(1) / static_cast<T>(g.kernel_h * g.kernel_w);
  util::parallel_for(std::int64_t{0}, planes, planes * in_plane >= kParallelMinElements, [&](std::int64_t plane) {
    T* grad_in = dx + plane * in_plane;
    std::fill(grad_in, grad_in + in_plane, T(0));
    for (std::int64_t oh = 0; oh < out_h; ++oh) {
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const Window win = window_at(g, oh, ow);
        const T share = dy[plane * out_plane + oh * out_w + ow] * inv_area;
        for (std::int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (std::int64_t iw = win.w0; iw < win.w1; ++iw) grad_in[ih * g.width + iw] += share;
        }
      }
    }
  });
}

template <class T>
void global_avg_pool_forward(std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                             const T* x, T* y) {
  AIACC_CHECK(batch >= 0 && channels > 0 && spatial > 0,
              "global average pooling of N={} C={} H*W={}", batch, channels, spatial);
  const std::int64_t planes = batch * channels;
  util::parallel_for(std::int64_t{0}, planes, planes * spatial >= kParallelMinElements, [&](std::int64_t plane) {
    const T* in = x + plane * spatial;
    double sum = 0;  // double: a float sum over a large plane would lose digits
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < spatial; ++i) sum += static_cast<double>(in[i]);
    y[plane] = static_cast<T>(sum / static_cast<double>(spatial));
  });
}

template <class T>
void global_avg_pool_backward(std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                              const T* dy, T* dx) {
  AIACC_CHECK(batch >= 0 && channels > 0 && spatial > 0,
              "global average pooling of N={} C={} H*W={}", batch, channels, spatial);
  const std::int64_t planes = batch * channels;
  const T inv_spatial = T(1) / static_cast<T>(spatial);
  util::parallel_for(std::int64_t{0}, planes, planes * spatial >= kParallelMinElements, [&](std::int64_t plane) {
    std::fill_n(dx + plane * spatial, spatial, dy[plane] * inv_spatial);
  });
}

#define AIACC_INSTANTIATE_POOLING(T)                                                              \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, std::int64_t*);        \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const std::int64_t*, T*); \
  template void avg_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*);                       \
  template void avg_pool2d_backward<T>(const Pool2dGeometry&, const T*, T*);                      \
  template void global_avg_pool_forward<T>(std::int64_t, std::int64_t, std::int64_t, const T*,    \
                                           T*);                                                   \
  template void global_avg_pool_backward<T>(std::int64_t, std::int64_t, std::int64_t, const T*, T*);
AIACC_INSTANTIATE_POOLING(float)
AIACC_INSTANTIATE_POOLING(double)
#undef AIACC_INSTANTIATE_POOLING

}  // namespace aiacc::kernels
