// Naive reference implementations of the dense kernels (plain loops, double accumulation),
// written straight from the definitions so they can disagree with the fast kernels
// (shared/STYLE.md practice 22). Shared by the kernel and layer tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/kernels/conv2d.h"
#include "core/kernels/pooling.h"

namespace aiacc::testing::reference {

using std::int64_t;

// y[n, o] = sum_i x[n, i] * w[o, i] + b[o]
template <class T>
std::vector<double> linear(int64_t n, int64_t in, int64_t out, const T* x, const T* w, const T* b) {
  std::vector<double> y(n * out);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += double(x[r * in + i]) * double(w[o * in + i]);
      y[r * out + o] = sum;
    }
  }
  return y;
}

// Calls fn(n, o, oh, ow, c, ih, iw, ki, kj) for every (output, real input) pair a convolution
// multiplies: the single definition the conv references below share.
template <class Fn>
void for_each_conv_tap(const kernels::Conv2dGeometry& g, Fn&& fn) {
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oh = 0; oh < g.out_height(); ++oh)
        for (int64_t ow = 0; ow < g.out_width(); ++ow)
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t ki = 0; ki < g.kernel_h; ++ki)
              for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
                const int64_t ih = oh * g.stride_h - g.pad_h + ki;
                const int64_t iw = ow * g.stride_w - g.pad_w + kj;
                if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
                fn(n, o, oh, ow, c, ih, iw, ki, kj);
              }
}

inline int64_t x_index(const kernels::Conv2dGeometry& g, int64_t n, int64_t c, int64_t h,
                       int64_t w) {
  return ((n * g.in_channels + c) * g.height + h) * g.width + w;
}
inline int64_t y_index(const kernels::Conv2dGeometry& g, int64_t n, int64_t o, int64_t h,
                       int64_t w) {
  return ((n * g.out_channels + o) * g.out_height() + h) * g.out_width() + w;
}
inline int64_t w_index(const kernels::Conv2dGeometry& g, int64_t o, int64_t c, int64_t ki,
                       int64_t kj) {
  return ((o * g.in_channels + c) * g.kernel_h + ki) * g.kernel_w + kj;
}

template <class T>
std::vector<double> conv2d_forward(const kernels::Conv2dGeometry& g, const T* x, const T* w,
                                   const T* b) {
  std::vector<double> y(g.output_numel());
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oh = 0; oh < g.out_height(); ++oh)
        for (int64_t ow = 0; ow < g.out_width(); ++ow) y[y_index(g, n, o, oh, ow)] = b ? b[o] : 0;
  for_each_conv_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                           int64_t iw, int64_t ki, int64_t kj) {
    y[y_index(g, n, o, oh, ow)] +=
        double(x[x_index(g, n, c, ih, iw)]) * double(w[w_index(g, o, c, ki, kj)]);
  });
  return y;
}

template <class T>
std::vector<double> conv2d_backward_data(const kernels::Conv2dGeometry& g, const T* w,
                                         const T* dy) {
  std::vector<double> dx(g.input_numel());
  for_each_conv_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                           int64_t iw, int64_t ki, int64_t kj) {
    dx[x_index(g, n, c, ih, iw)] +=
        double(dy[y_index(g, n, o, oh, ow)]) * double(w[w_index(g, o, c, ki, kj)]);
  });
  return dx;
}

template <class T>
std::vector<double> conv2d_backward_weight(const kernels::Conv2dGeometry& g, const T* x,
                                           const T* dy) {
  std::vector<double> dw(g.weight_numel());
  for_each_conv_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                           int64_t iw, int64_t ki, int64_t kj) {
    dw[w_index(g, o, c, ki, kj)] +=
        double(dy[y_index(g, n, o, oh, ow)]) * double(x[x_index(g, n, c, ih, iw)]);
  });
  return dw;
}

template <class T>
std::vector<double> conv2d_backward_bias(const kernels::Conv2dGeometry& g, const T* dy) {
  std::vector<double> db(g.out_channels);
  const int64_t plane = g.out_height() * g.out_width();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t p = 0; p < plane; ++p) db[o] += dy[(n * g.out_channels + o) * plane + p];
  return db;
}

// Max pooling: output values and, per output, the flat input-plane index of the first
// maximum in row-major window order.
struct MaxPoolResult {
  std::vector<double> y;
  std::vector<int64_t> argmax;
};

template <class T>
MaxPoolResult max_pool2d(const kernels::Pool2dGeometry& g, const T* x) {
  MaxPoolResult r;
  const int64_t oh_n = g.out_height(), ow_n = g.out_width();
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_index = -1;
        for (int64_t ki = 0; ki < g.kernel_h; ++ki)
          for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
            const int64_t ih = oh * g.stride_h - g.pad_h + ki, iw = ow * g.stride_w - g.pad_w + kj;
            if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
            const double v = x[(plane * g.height + ih) * g.width + iw];
            if (best_index < 0 || v > best) {
              best = v;
              best_index = ih * g.width + iw;
            }
          }
        r.y.push_back(best);
        r.argmax.push_back(best_index);
      }
  return r;
}

// Average pooling with count_include_pad=true: window sum / (KH*KW).
template <class T>
std::vector<double> avg_pool2d(const kernels::Pool2dGeometry& g, const T* x) {
  std::vector<double> y;
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane)
    for (int64_t oh = 0; oh < g.out_height(); ++oh)
      for (int64_t ow = 0; ow < g.out_width(); ++ow) {
        double sum = 0;
        for (int64_t ki = 0; ki < g.kernel_h; ++ki)
          for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
            const int64_t ih = oh * g.stride_h - g.pad_h + ki, iw = ow * g.stride_w - g.pad_w + kj;
            if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) continue;
            sum += x[(plane * g.height + ih) * g.width + iw];
          }
        y.push_back(sum / double(g.kernel_h * g.kernel_w));
      }
  return y;
}

// Element-wise |actual - expected| <= atol + rtol * |expected|, naming the first bad element.
template <class T>
::testing::AssertionResult all_close(std::span<const T> actual, std::span<const double> expected,
                                     double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (!(std::abs(a - e) <= atol + rtol * std::abs(e))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << actual.size() << ": " << a << " vs expected " << e;
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult all_close(const std::vector<T>& actual,
                                     const std::vector<double>& expected, double rtol,
                                     double atol) {
  return all_close(std::span<const T>(actual), std::span<const double>(expected), rtol, atol);
}

}  // namespace aiacc::testing::reference
