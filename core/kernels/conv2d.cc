// Conv2d kernels: im2col + Eigen GEMM, parallel over the batch (see conv2d.h for the plan).
#include "core/kernels/conv2d.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/kernels/conv2d_direct.h"
#include "core/kernels/gemm.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {

bool Conv2dGeometry::is_same_stride1() const {
  return stride_h == 1 && stride_w == 1 && out_height() == height && out_width() == width;
}

bool Conv2dGeometry::is_pointwise() const {
  return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
         pad_w == 0;
}

void Conv2dGeometry::validate() const {
  AIACC_CHECK(batch >= 0 && in_channels > 0 && height > 0 && width > 0 && out_channels > 0 &&
                  kernel_h > 0 && kernel_w > 0 && stride_h > 0 && stride_w > 0 && pad_h >= 0 &&
                  pad_w >= 0,
              "invalid conv2d geometry {}", str());
  AIACC_CHECK(height + 2 * pad_h >= kernel_h && width + 2 * pad_w >= kernel_w,
              "conv2d kernel is larger than the padded input: {}", str());
}

std::string Conv2dGeometry::str() const {
  return fmt::format("N={} C={} H={} W={} O={} K={}x{} s={}x{} p={}x{}", batch, in_channels, height,
                     width, out_channels, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
}

namespace {

// Output columns ow whose input column iw = ow * stride - pad + kj lies inside [0, width):
// the half-open range [lo, hi). Computing it once per kernel column keeps bounds checks out of
// the copy loops, which then vectorise (and become memcpy for stride 1).
struct ColumnRange {
  std::int64_t lo, hi;
};
ColumnRange valid_columns(const Conv2dGeometry& g, std::int64_t kj) {
  const std::int64_t out_w = g.out_width();
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; };
  const std::int64_t lo = std::min(out_w, ceil_div(g.pad_w - kj, g.stride_w));
  const std::int64_t hi = std::min(out_w, ceil_div(g.width + g.pad_w - kj, g.stride_w));
  return {lo, std::max(lo, hi)};
}

// A stride-1 "same" convolution (out_w == width, e.g. 3x3 with padding 1): for a kernel tap
// (ki, kj) the valid part of a column row is ONE contiguous run of the input plane shifted by
// (ki - ph) * W + (kj - pw). Copying that run in one go, then fixing the few entries that
// wrapped around a row edge (they belong to the padding), replaces many short per-row copies,
// which dominate for the 7- to 28-wide planes of small networks.
//
// For tap (ki, kj) of a same/stride-1 convolution: valid output rows [row_lo, row_hi), valid
// columns [lo, hi) within each row, and the offset from an output position to its input.
struct TapRange {
  std::int64_t row_lo, row_hi, lo, hi, shift;
};
TapRange tap_range(const Conv2dGeometry& g, std::int64_t ki, std::int64_t kj) {
  const std::int64_t dh = ki - g.pad_h, dw = kj - g.pad_w;
  // Both bounds capped to the image: padding can exceed it (pad_h > H), and an uncapped row_lo
  // would clear rows beyond the tap's block.
  const std::int64_t row_lo = std::min(g.height, std::max<std::int64_t>(0, -dh));
  const std::int64_t row_hi = std::max(row_lo, std::min(g.height, g.height - dh));
  const std::int64_t lo = std::min(g.width, std::max<std::int64_t>(0, -dw));
  const std::int64_t hi = std::max(lo, std::min(g.width, g.width - dw));
  return {row_lo, row_hi, lo, hi, dh * g.width + dw};
}

// Zeroes columns [0, lo) and [hi, W) of rows [row_lo, row_hi) of one column-matrix row. Walks
// column by column: per-row loops of one or two elements would become memset calls.
template <class T>
void clear_border_columns(const Conv2dGeometry& g, const TapRange& t, T* row) {
  const std::int64_t w = g.width;
  for (std::int64_t ow = 0; ow < w; ++ow) {
    if (ow == t.lo) ow = t.hi;
    if (ow >= w) break;
    for (std::int64_t oh = t.row_lo; oh < t.row_hi; ++oh) row[oh * w + ow] = T(0);
  }
}

// The ranges of every tap, in (ki, kj) order: they do not depend on the channel.
std::vector<TapRange> tap_ranges(const Conv2dGeometry& g) {
  std::vector<TapRange> taps;
  taps.reserve(static_cast<std::size_t>(g.kernel_h * g.kernel_w));
  for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
    for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) taps.push_back(tap_range(g, ki, kj));
  }
  return taps;
}

template <class T>
void im2col_same_stride1(const Conv2dGeometry& g, const T* x, T* col) {
  const std::int64_t w = g.width, plane = g.height * g.width;
  const std::vector<TapRange> taps = tap_ranges(g);
  const auto tap_count = static_cast<std::int64_t>(taps.size());
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    const T* x_c = x + c * plane;
    for (std::int64_t tap = 0; tap < tap_count; ++tap) {
      T* out = col + (c * tap_count + tap) * plane;
      const TapRange& t = taps[static_cast<std::size_t>(tap)];
      std::fill(out, out + t.row_lo * w, T(0));
      std::fill(out + t.row_hi * w, out + plane, T(0));
      if (t.row_lo >= t.row_hi || t.lo >= t.hi) {
        std::fill(out + t.row_lo * w, out + t.row_hi * w, T(0));
        continue;
      }
      // The run [first, last) stays inside the input plane; entries outside [lo, hi) of
      // each row picked up neighbouring pixels and are zeroed below.
      const std::int64_t first = t.row_lo * w + t.lo, last = (t.row_hi - 1) * w + t.hi;
      std::copy(x_c + first + t.shift, x_c + last + t.shift, out + first);
      clear_border_columns(g, t, out);
    }
  }
}

// The adjoint of im2col_same_stride1. It clears the wrapped entries of `col` (scratch owned by
// the caller) so that each tap becomes one contiguous, vectorisable add. A tap that covers the
// whole plane unshifted (the centre of an odd kernel) is copied first, which saves clearing dx.
template <class T>
void col2im_same_stride1(const Conv2dGeometry& g, T* col, T* dx) {
  const std::int64_t w = g.width, h = g.height, plane = h * w;
  const std::vector<TapRange> taps = tap_ranges(g);
  const auto tap_count = static_cast<std::int64_t>(taps.size());
  std::int64_t whole = -1;
  for (std::int64_t tap = 0; tap < tap_count && whole < 0; ++tap) {
    const TapRange& t = taps[static_cast<std::size_t>(tap)];
    if (t.shift == 0 && t.row_lo == 0 && t.row_hi == h && t.lo == 0 && t.hi == w) whole = tap;
  }
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    T* dx_c = dx + c * plane;
    const T* col_c = col + c * tap_count * plane;
    if (whole >= 0) {
      std::copy(col_c + whole * plane, col_c + (whole + 1) * plane, dx_c);
    } else {
      std::fill(dx_c, dx_c + plane, T(0));
    }
    for (std::int64_t tap = 0; tap < tap_count; ++tap) {
      const TapRange& t = taps[static_cast<std::size_t>(tap)];
      if (tap == whole || t.row_lo >= t.row_hi || t.lo >= t.hi) continue;
      T* in = col + (c * tap_count + tap) * plane;
      clear_border_columns(g, t, in);
      const std::int64_t first = t.row_lo * w + t.lo, last = (t.row_hi - 1) * w + t.hi;
      T* dst = dx_c + first + t.shift;
      const T* src = in + first;
      for (std::int64_t q = 0; q < last - first; ++q) dst[q] += src[q];
    }
  }
}

// col [K, P] <- patches of one image x [C, H, W]; row (c, ki, kj), column (oh, ow) holds
// x[c, oh*sh - ph + ki, ow*sw - pw + kj], or 0 in the padding.
template <class T>
void im2col_general(const Conv2dGeometry& g, const T* x, T* col) {
  const std::int64_t out_h = g.out_height(), out_w = g.out_width(), plane = out_h * out_w;
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) {
        T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * plane;
        const auto [lo, hi] = valid_columns(g, kj);
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
          T* out = row + oh * out_w;
          const std::int64_t ih = oh * g.stride_h - g.pad_h + ki;
          if (ih < 0 || ih >= g.height) {
            std::fill(out, out + out_w, T(0));
            continue;
          }
          // Index of x[c, ih, ow*sw - pw + kj] is base + ow*sw (valid for ow in [lo, hi)).
          const std::int64_t base = (c * g.height + ih) * g.width - g.pad_w + kj;
          std::fill(out, out + lo, T(0));
          if (g.stride_w == 1) {
            std::copy(x + base + lo, x + base + hi, out + lo);
          } else {
            for (std::int64_t ow = lo; ow < hi; ++ow) out[ow] = x[base + ow * g.stride_w];
          }
          std::fill(out + hi, out + out_w, T(0));
        }
      }
    }
  }
}

// dx [C, H, W] <- the adjoint of im2col: every column entry is added back to the input pixel it
// was copied from (padding entries are dropped). dx is overwritten.
template <class T>
void col2im_general(const Conv2dGeometry& g, const T* col, T* dx) {
  const std::int64_t out_h = g.out_height(), out_w = g.out_width(), plane = out_h * out_w;
  std::fill(dx, dx + g.in_channels * g.height * g.width, T(0));
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * plane;
        const auto [lo, hi] = valid_columns(g, kj);
        for (std::int64_t oh = 0; oh < out_h; ++oh) {
          const std::int64_t ih = oh * g.stride_h - g.pad_h + ki;
          if (ih < 0 || ih >= g.height) continue;
          const T* in = row + oh * out_w;
          const std::int64_t base = (c * g.height + ih) * g.width - g.pad_w + kj;
          if (g.stride_w == 1) {
            for (std::int64_t ow = lo; ow < hi; ++ow) dx[base + ow] += in[ow];
          } else {
            for (std::int64_t ow = lo; ow < hi; ++ow) dx[base + ow * g.stride_w] += in[ow];
          }
        }
      }
    }
  }
}

template <class T>
void im2col(const Conv2dGeometry& g, const T* x, T* col) {
  if (g.is_same_stride1()) {
    im2col_same_stride1(g, x, col);
  } else {
    im2col_general(g, x, col);
  }
}

// col is scratch: the fast path overwrites its padding entries.
template <class T>
void col2im(const Conv2dGeometry& g, T* col, T* dx) {
  if (g.is_same_stride1()) {
    col2im_same_stride1(g, col, dx);
  } else {
    col2im_general(g, col, dx);
  }
}

// How the batch is processed: split across `slots` OpenMP threads (each with its own workspace
// slot and single-threaded GEMMs), or image by image with one slot and multi-threaded GEMMs.
// Splitting the batch wins when every thread gets an image: im2col and col2im then run in
// parallel too, and no GEMM is too small to split well. Tiny convolutions stay on one thread:
// waking a team costs more than they do (and much more on an oversubscribed machine).
// The batch is cut into `chunks` runs of consecutive images that threads take as they finish,
// so a thread slowed by the machine (another process, an interrupt) does not hold the others
// at the closing barrier; the cut depends only on the batch, the thread count and (for the
// weight gradient, whose chunks each keep a partial sum) the weights' size.
struct BatchPlan {
  bool parallel;
  int slots;
  std::int64_t chunks;
};

constexpr double kMinParallelMacs = 1 << 18;
constexpr std::int64_t kMinDirectPlane = 64;
constexpr std::int64_t kMinDirectDepth = 64;
constexpr std::int64_t kMinDirectOutputs = 8;
// The weight gradient's direct kernel wins up to 32 channels of 3x3 (ResNet-20: 1.6x at 16
// channels, 5% at 32) and loses a few percent to GEMM at 64.
constexpr std::int64_t kMaxDirectWeightGradDepth = 288;
constexpr std::int64_t kChunksPerThread = 8;

// The weight gradient keeps one partial sum per chunk: fewer chunks where they would pass this.
constexpr std::int64_t kMaxPartialBytes = std::int64_t{64} << 20;

// `partial_bytes`: the size of one chunk's partial result, or 0 when chunks keep none.
BatchPlan plan_batch(const Conv2dGeometry& g, std::int64_t partial_bytes = 0) {
  const int threads = omp_get_max_threads();
  const double macs = static_cast<double>(g.output_numel()) * static_cast<double>(g.in_channels) *
                      static_cast<double>(g.kernel_h * g.kernel_w);
  const bool parallel = threads > 1 && g.batch >= threads && macs >= kMinParallelMacs;
  if (!parallel) return {false, 1, 1};
  std::int64_t chunks = std::min<std::int64_t>(g.batch, kChunksPerThread * threads);
  if (partial_bytes > 0) {
    chunks = std::clamp<std::int64_t>(kMaxPartialBytes / partial_bytes, threads, chunks);
  }
  return {true, threads, chunks};
}

// Calls fn(begin, end, slot, chunk) for every chunk [begin, end) of the batch; calls with the
// same slot never run concurrently.
template <class Fn>
void for_each_chunk(const BatchPlan& plan, std::int64_t batch, const Fn& fn) {
  if (!plan.parallel) {
    fn(std::int64_t{0}, batch, 0, std::int64_t{0});
    return;
  }
#pragma omp parallel num_threads(plan.slots)
  {
    const int slot = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      fn(batch * chunk / plan.chunks, batch * (chunk + 1) / plan.chunks, slot, chunk);
    }
  }
}

// Calls fn(n, slot, chunk) for every image n; each chunk's images are visited in order by one
// thread.
template <class Fn>
void for_each_image(const BatchPlan& plan, std::int64_t batch, const Fn& fn) {
  for_each_chunk(plan, batch,
                 [&](std::int64_t begin, std::int64_t end, int slot, std::int64_t chunk) {
                   for (std::int64_t n = begin; n < end; ++n) fn(n, slot, chunk);
                 });
}

// Uninitialised scratch memory (per call, never per image): its users write before they read.
template <class T>
std::unique_ptr<T[]> workspace(std::int64_t count) {
  return std::make_unique_for_overwrite<T[]>(
      static_cast<std::size_t>(std::max<std::int64_t>(count, 1)));
}

}  // namespace

// True where the direct kernel beats im2col + GEMM (measured with aiacc-bench-kernels, float,
// 2 threads, AVX-512): stride 1 with same padding, each output fed by at least 64
// multiply-adds, at least one full tile of 8 outputs, and planes of 64 pixels or more. It wins
// by 15-35% on 16- to 64-channel 3x3 convolutions at 14x14 to 56x56 and stays within 5% at 256
// channels; on 7x7 planes a quarter of its lanes compute padding (GEMM 6% ahead at 64 channels,
// 30% at 512), and with 3 input or output channels (an RGB stem) it is 25-60% slower.
// Elsewhere GEMM stays: without AVX-512 a 16-float vector takes two registers and the tiles
// would spill, and when the batch is not split over threads (fewer images than threads) the
// direct kernel would run on one thread where Eigen's GEMM uses them all.
// `inputs` and `outputs` are the channels read and written: (C, O) forward, (O, C) for
// backward data.
bool use_direct(const Conv2dGeometry& g, std::int64_t inputs, std::int64_t outputs) {
#if defined(__AVX512F__)
  return g.is_same_stride1() && !g.is_pointwise() &&
         g.height * g.width >= kMinDirectPlane &&
         inputs * g.kernel_h * g.kernel_w >= kMinDirectDepth && outputs >= kMinDirectOutputs &&
         (plan_batch(g).parallel || omp_get_max_threads() == 1);
#else
  (void)g, (void)inputs, (void)outputs;
  return false;
#endif
}

// Runs a prepared direct convolution over the batch: in [N, inputs, H, W] -> out.
void run_direct(const Conv2dGeometry& g, const detail::DirectConv2d& conv, const float* in,
                std::int64_t in_image, const float* bias, float* out, std::int64_t out_image) {
  const BatchPlan plan = plan_batch(g);
  auto scratch = workspace<float>(plan.slots * conv.scratch_floats());
  for_each_image(plan, g.batch, [&](std::int64_t n, int slot, std::int64_t /*chunk*/) {
    conv.run(in + n * in_image, bias, out + n * out_image,
             scratch.get() + slot * conv.scratch_floats());
  });
}

template <class T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* b, T* y) {
  g.validate();
  if constexpr (std::is_same_v<T, float>) {
    if (use_direct(g, g.in_channels, g.out_channels)) {
      const detail::DirectConv2d conv(g, w, /*transposed=*/false);
      run_direct(g, conv, x, g.in_channels * g.height * g.width, b, y,
                 g.out_channels * g.out_height() * g.out_width());
      return;
    }
  }
  const std::int64_t k = g.in_channels * g.kernel_h * g.kernel_w;
  const std::int64_t p = g.out_height() * g.out_width();
  const std::int64_t in_image = g.in_channels * g.height * g.width, out_image = g.out_channels * p;
  const bool pointwise = g.is_pointwise();
  const BatchPlan plan = plan_batch(g);
  auto cols = workspace<T>(pointwise ? 0 : plan.slots * k * p);
  for_each_image(plan, g.batch, [&](std::int64_t n, int slot, std::int64_t /*chunk*/) {
    const T* x_n = x + n * in_image;
    T* y_n = y + n * out_image;
    // A pointwise convolution's image [C, H*W] already is its column matrix.
    const T* col = x_n;
    if (!pointwise) {
      T* own = cols.get() + slot * k * p;
      im2col(g, x_n, own);
      col = own;
    }
    if (b != nullptr) {
      for (std::int64_t o = 0; o < g.out_channels; ++o) std::fill_n(y_n + o * p, p, b[o]);
    }
    // y_n [O, P] = w [O, K] * col [K, P] (+ the bias already in y_n)
    gemm<T>(Trans::no, Trans::no, g.out_channels, p, k, T(1), w, col, b != nullptr ? T(1) : T(0),
            y_n);
  });
}

template <class T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* w, const T* dy, T* dx) {
  g.validate();
  if constexpr (std::is_same_v<T, float>) {
    if (use_direct(g, g.out_channels, g.in_channels)) {
      const detail::DirectConv2d conv(g, w, /*transposed=*/true);
      run_direct(g, conv, dy, g.out_channels * g.out_height() * g.out_width(), nullptr, dx,
                 g.in_channels * g.height * g.width);
      return;
    }
  }
  const std::int64_t k = g.in_channels * g.kernel_h * g.kernel_w;
  const std::int64_t p = g.out_height() * g.out_width();
  const std::int64_t in_image = g.in_channels * g.height * g.width, out_image = g.out_channels * p;
  const bool pointwise = g.is_pointwise();
  const BatchPlan plan = plan_batch(g);
  auto cols = workspace<T>(pointwise ? 0 : plan.slots * k * p);
  for_each_image(plan, g.batch, [&](std::int64_t n, int slot, std::int64_t /*chunk*/) {
    const T* dy_n = dy + n * out_image;
    T* dx_n = dx + n * in_image;
    if (pointwise) {
      // dx_n [C, H*W] = w^T [C, O] * dy_n [O, P]
      gemm<T>(Trans::yes, Trans::no, k, p, g.out_channels, T(1), w, dy_n, T(0), dx_n);
      return;
    }
    // dcol [K, P] = w^T [K, O] * dy_n [O, P], then scatter-add the patches back.
    T* dcol = cols.get() + slot * k * p;
    gemm<T>(Trans::yes, Trans::no, k, p, g.out_channels, T(1), w, dy_n, T(0), dcol);
    col2im(g, dcol, dx_n);
  });
}

template <class T>
void conv2d_backward_weight(const Conv2dGeometry& g, const T* x, const T* dy, T* dw) {
  g.validate();
  const std::int64_t k = g.in_channels * g.kernel_h * g.kernel_w;
  const std::int64_t p = g.out_height() * g.out_width();
  const std::int64_t in_image = g.in_channels * g.height * g.width, out_image = g.out_channels * p;
  const std::int64_t weights = g.out_channels * k;
  const bool pointwise = g.is_pointwise();
  const BatchPlan plan = plan_batch(g, weights * static_cast<std::int64_t>(sizeof(T)));
  // Each chunk sums its images into its own partial (no races, no atomics), zeroed by the
  // thread that fills it; the partials are reduced below in chunk order, so the result does
  // not depend on which thread took a chunk.
  auto partials = workspace<T>(plan.parallel ? plan.chunks * weights : 0);
  T* sums = plan.parallel ? partials.get() : dw;
  bool direct = false;
  if constexpr (std::is_same_v<T, float>) {
    direct = use_direct(g, g.in_channels, g.out_channels) &&
             g.in_channels * g.kernel_h * g.kernel_w <= kMaxDirectWeightGradDepth;
    if (direct) {
      const detail::DirectConv2dWeightGrad grad(g);
      auto scratch = workspace<float>(plan.slots * grad.scratch_floats());
      for_each_chunk(plan, g.batch,
                     [&](std::int64_t begin, std::int64_t end, int slot, std::int64_t chunk) {
                       float* sum = sums + chunk * weights;
                       std::fill_n(sum, weights, 0.0F);
                       grad.accumulate(x + begin * in_image, dy + begin * out_image, end - begin,
                                       sum, scratch.get() + slot * grad.scratch_floats());
                     });
    }
  }
  if (!direct) {
    auto cols = workspace<T>(pointwise ? 0 : plan.slots * k * p);
    for_each_chunk(plan, g.batch, [&](std::int64_t begin, std::int64_t end, int slot,
                                      std::int64_t chunk) {
      T* sum = sums + chunk * weights;
      if (begin == end) std::fill_n(sum, weights, T(0));
      for (std::int64_t n = begin; n < end; ++n) {
        const T* x_n = x + n * in_image;
        const T* col = x_n;
        if (!pointwise) {
          T* own = cols.get() + slot * k * p;
          im2col(g, x_n, own);
          col = own;
        }
        // sum [O, K] (+)= dy_n [O, P] * col^T [P, K]; the chunk's first image overwrites.
        gemm<T>(Trans::no, Trans::yes, g.out_channels, k, p, T(1), dy + n * out_image, col,
                n == begin ? T(0) : T(1), sum);
      }
    });
  }
  if (!plan.parallel) return;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < weights; ++i) {
    T total = partials[i];
    for (std::int64_t c = 1; c < plan.chunks; ++c) total += partials[c * weights + i];
    dw[i] = total;
  }
}

template <class T>
void conv2d_backward_bias(const Conv2dGeometry& g, const T* dy, T* db) {
  g.validate();
  const std::int64_t p = g.out_height() * g.out_width();
  util::parallel_for(std::int64_t{0}, g.out_channels, g.batch * g.out_channels * p >= 1 << 15, [&](std::int64_t o) {
    double total = 0;
    for (std::int64_t n = 0; n < g.batch; ++n) {
      const T* row = dy + (n * g.out_channels + o) * p;
      double partial = 0;
      // An explicit SIMD reduction: the one place we allow reassociation of the sum.
#pragma omp simd reduction(+ : partial)
      for (std::int64_t i = 0; i < p; ++i) partial += static_cast<double>(row[i]);
      total += partial;
    }
    db[o] = static_cast<T>(total);
  });
}

#define AIACC_INSTANTIATE_CONV2D(T)                                                         \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*); \
  template void conv2d_backward_data<T>(const Conv2dGeometry&, const T*, const T*, T*);     \
  template void conv2d_backward_weight<T>(const Conv2dGeometry&, const T*, const T*, T*);   \
  template void conv2d_backward_bias<T>(const Conv2dGeometry&, const T*, T*);
AIACC_INSTANTIATE_CONV2D(float)
AIACC_INSTANTIATE_CONV2D(double)
#undef AIACC_INSTANTIATE_CONV2D

}  // namespace aiacc::kernels
