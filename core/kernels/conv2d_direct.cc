// Direct same/stride-1 convolution in float (see conv2d_direct.h).
#include "core/kernels/conv2d_direct.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

// The helpers below pass 64-byte vectors by value; GCC warns that their ABI differs without
// AVX-512. They are internal to this file, so no caller compiled differently can see them.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace aiacc::kernels::detail {
namespace {

// GCC/Clang vector extension: one AVX-512 register where the target has it, split into
// narrower registers by the compiler elsewhere, so the kernel stays correct everywhere (it is
// only chosen on AVX-512: see use_direct in conv2d.cc).
constexpr std::int64_t kLanes = 16;
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

constexpr std::int64_t kTileChannels = 8;  // output channels per register tile
constexpr std::int64_t kTileVectors = 3;   // vectors of positions per full register tile
constexpr std::int64_t kTilePositions = kLanes * kTileVectors;
static_assert(kTileVectors == 3, "accumulate() finishes a row with a tile of 1 or 2 vectors");

std::int64_t round_up(std::int64_t value, std::int64_t step) {
  return (value + step - 1) / step * step;
}

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof(v)); }

// dst[0, n) = src[0, n) for short rows, inline: whole vectors, then one vector ending at n
// (overlapping the previous one) or, for rows under a vector, single floats.
void copy_row(const float* src, float* dst, std::int64_t n) {
  if (n >= kLanes) {
    for (std::int64_t i = 0; i + kLanes <= n; i += kLanes) store(dst + i, load(src + i));
    store(dst + n - kLanes, load(src + n - kLanes));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace

PaddedLayout::PaddedLayout(const Conv2dGeometry& g, std::int64_t channels)
    : channels(channels),
      height(g.height),
      width(g.width),
      pad_h(g.pad_h),
      pad_w(g.pad_w),
      padded_width(g.width + 2 * g.pad_w),
      padded_plane((g.height + 2 * g.pad_h) * (g.width + 2 * g.pad_w)),
      lead(round_up(g.pad_w, kLanes)),
      positions(round_up(g.height * (g.width + 2 * g.pad_w), kLanes)) {
  AIACC_CHECK(g.is_same_stride1(), "direct convolution needs stride 1 and same padding: {}",
              g.str());
  // The last vector of the last channel starts at most `positions` - kLanes past its first
  // output and reads up to pad_h rows and pad_w columns further: everything up to there is
  // allocated (with kLanes floats to spare), and zero outside the image.
  floats = lead + (channels - 1) * padded_plane + 2 * pad_h * padded_width + pad_w + positions +
           kLanes;
  for (std::int64_t ki = 0; ki < g.kernel_h; ++ki) {
    for (std::int64_t kj = 0; kj < g.kernel_w; ++kj) {
      tap_offsets.push_back((ki - pad_h) * padded_width + (kj - pad_w));
    }
  }
}

void PaddedLayout::pad(const float* image, float* padded) const {
  // One fill of the whole buffer, then the rows: per-row library calls would cost more than
  // the copying itself on rows of 7 to 56 floats. (Clearing only the padding, with inline
  // stores between rows, measured no faster: reading the image dominates.)
  std::fill(padded, padded + floats, 0.0F);
  for (std::int64_t c = 0; c < channels; ++c) {
    float* plane = padded + lead + c * padded_plane + pad_h * padded_width + pad_w;
    const float* source = image + c * height * width;
    for (std::int64_t h = 0; h < height; ++h) {
      copy_row(source + h * width, plane + h * padded_width, width);
    }
  }
}

DirectConv2d::DirectConv2d(const Conv2dGeometry& g, const float* w, bool transposed)
    : inputs_(transposed ? g.out_channels : g.in_channels),
      outputs_(transposed ? g.in_channels : g.out_channels),
      layout_(g, transposed ? g.out_channels : g.in_channels),
      channel_blocks_((outputs_ + kTileChannels - 1) / kTileChannels) {
  const std::int64_t kh = g.kernel_h, kw = g.kernel_w, taps = kh * kw;
  // packed_[block][input][tap][lane] = the weight from `input` at `tap` to output
  // block * kTileChannels + lane. Backward data uses the kernel flipped in both axes with the
  // channel axes swapped: dx[c] = sum over o of dy[o] correlated with w[o, c] rotated 180 degrees.
  packed_.assign(static_cast<std::size_t>(channel_blocks_ * inputs_ * taps * kTileChannels), 0.0F);
  for (std::int64_t out = 0; out < outputs_; ++out) {
    const std::int64_t block = out / kTileChannels, lane = out % kTileChannels;
    for (std::int64_t in = 0; in < inputs_; ++in) {
      for (std::int64_t ki = 0; ki < kh; ++ki) {
        for (std::int64_t kj = 0; kj < kw; ++kj) {
          const std::int64_t source =
              transposed ? ((in * g.in_channels + out) * kh + (kh - 1 - ki)) * kw + (kw - 1 - kj)
                         : ((out * g.in_channels + in) * kh + ki) * kw + kj;
          const std::int64_t tap = ki * kw + kj;
          packed_[static_cast<std::size_t>(((block * inputs_ + in) * taps + tap) * kTileChannels +
                                           lane)] = w[source];
        }
      }
    }
  }
}

namespace {

// One register tile: kTileChannels outputs x Vectors vectors of positions from `first`,
// accumulated over every input channel and tap, stored to rows [lanes][positions].
template <std::int64_t Vectors>
void accumulate_tile(const float* base, std::int64_t inputs, std::int64_t padded_plane,
                     const std::int64_t* offsets, std::int64_t taps, const float* weights,
                     std::int64_t lanes, float* rows, std::int64_t row_stride) {
  Vec acc[kTileChannels][Vectors] = {};
  for (std::int64_t in = 0; in < inputs; ++in) {
    const float* plane = base + in * padded_plane;
    const float* in_weights = weights + in * taps * kTileChannels;
    for (std::int64_t tap = 0; tap < taps; ++tap) {
      const float* source = plane + offsets[tap];
      Vec x[Vectors];
#pragma GCC unroll 4
      for (std::int64_t v = 0; v < Vectors; ++v) x[v] = load(source + v * kLanes);
      const float* tap_weights = in_weights + tap * kTileChannels;
#pragma GCC unroll 8
      for (std::int64_t lane = 0; lane < kTileChannels; ++lane) {
        const float weight = tap_weights[lane];
#pragma GCC unroll 4
        for (std::int64_t v = 0; v < Vectors; ++v) acc[lane][v] += x[v] * weight;
      }
    }
  }
  for (std::int64_t lane = 0; lane < lanes; ++lane) {
    for (std::int64_t v = 0; v < Vectors; ++v) store(rows + lane * row_stride + v * kLanes, acc[lane][v]);
  }
}

}  // namespace

void DirectConv2d::accumulate(const float* padded, float* rows) const {
  const std::int64_t taps = static_cast<std::int64_t>(layout_.tap_offsets.size());
  const std::int64_t positions = layout_.positions;
  const float* base = layout_.origin(padded, 0);
  const std::int64_t* offsets = layout_.tap_offsets.data();
  for (std::int64_t block = 0; block < channel_blocks_; ++block) {
    const std::int64_t lanes = std::min(kTileChannels, outputs_ - block * kTileChannels);
    const float* weights = packed_.data() + block * inputs_ * taps * kTileChannels;
    float* block_rows = rows + block * kTileChannels * positions;
    // Full tiles, then one narrower tile for the last one or two vectors.
    std::int64_t first = 0;
    for (; first + kTilePositions <= positions; first += kTilePositions) {
      accumulate_tile<kTileVectors>(base + first, inputs_, layout_.padded_plane, offsets, taps,
                                    weights, lanes, block_rows + first, positions);
    }
    const std::int64_t rest = (positions - first) / kLanes;
    if (rest == 2) {
      accumulate_tile<2>(base + first, inputs_, layout_.padded_plane, offsets, taps, weights,
                         lanes, block_rows + first, positions);
    } else if (rest == 1) {
      accumulate_tile<1>(base + first, inputs_, layout_.padded_plane, offsets, taps, weights,
                         lanes, block_rows + first, positions);
    }
  }
}

void DirectConv2d::run(const float* in, const float* bias, float* out, float* scratch) const {
  float* padded = scratch;
  float* rows = scratch + layout_.floats;
  layout_.pad(in, padded);
  accumulate(padded, rows);
  // Keep the interior columns of each row: output (h, w) sits at h * padded width + pw + w.
  const std::int64_t height = layout_.height, width = layout_.width;
  for (std::int64_t o = 0; o < outputs_; ++o) {
    const float* row = rows + o * layout_.positions + layout_.pad_w;
    float* plane = out + o * height * width;
    const float b = bias != nullptr ? bias[o] : 0.0F;
    for (std::int64_t h = 0; h < height; ++h) {
      const float* source = row + h * layout_.padded_width;
      float* target = plane + h * width;
      for (std::int64_t x = 0; x < width; ++x) target[x] = source[x] + b;
    }
  }
}

// ---- weight gradient ----

namespace {

constexpr std::int64_t kGradOutputs = 4;  // dy rows per register tile
constexpr std::int64_t kGradSources = 6;  // shifted input rows (channel, tap) per register tile
// A pass sums the products of several images in the registers before the lanes are added up
// (24 lane sums per tile): up to 8 images, within 1 MiB of scratch. Fewer images per pass cost
// up to 45% on 14x14 planes (ResNet-20 stage 2), where a tile has few positions per image.
constexpr std::int64_t kPassBytes = std::int64_t{1} << 20;
constexpr std::int64_t kMaxImagesPerPass = 8;

float lane_sum(const Vec& v) {
  float total = 0;
  for (std::int64_t lane = 0; lane < kLanes; ++lane) total += v[lane];
  return total;
}

}  // namespace

DirectConv2dWeightGrad::DirectConv2dWeightGrad(const Conv2dGeometry& g)
    : out_channels_(g.out_channels),
      layout_(g, g.in_channels),
      images_per_pass_(std::clamp<std::int64_t>(
          kPassBytes / static_cast<std::int64_t>(
                           (layout_.floats + g.out_channels * layout_.positions) * sizeof(float)),
          1, kMaxImagesPerPass)),
      weights_per_output_(g.in_channels * g.kernel_h * g.kernel_w),
      padded_outputs_(round_up(g.out_channels, kGradOutputs)) {
  const std::int64_t taps = g.kernel_h * g.kernel_w;
  for (std::int64_t c = 0; c < g.in_channels; ++c) {
    for (std::int64_t tap = 0; tap < taps; ++tap) {
      sources_.push_back(c * layout_.padded_plane + layout_.tap_offsets[static_cast<std::size_t>(tap)]);
    }
  }
  zero_row_ = images_per_pass_ * (layout_.floats + out_channels_ * layout_.positions);
}

std::int64_t DirectConv2dWeightGrad::scratch_floats() const {
  return zero_row_ + layout_.positions;
}

void DirectConv2dWeightGrad::accumulate(const float* x, const float* dy, std::int64_t images,
                                        float* dw, float* scratch) const {
  const std::int64_t height = layout_.height, width = layout_.width;
  const std::int64_t in_image = layout_.channels * height * width;
  const std::int64_t out_image = out_channels_ * height * width;
  const std::int64_t row_floats = out_channels_ * layout_.positions;
  float* padded_x = scratch;
  float* dy_rows = scratch + images_per_pass_ * layout_.floats;
  std::fill(scratch + zero_row_, scratch + zero_row_ + layout_.positions, 0.0F);
  for (std::int64_t first = 0; first < images; first += images_per_pass_) {
    const std::int64_t count = std::min(images_per_pass_, images - first);
    for (std::int64_t i = 0; i < count; ++i) {
      layout_.pad(x + (first + i) * in_image, padded_x + i * layout_.floats);
      // dy in the positions' layout, zero in the padding columns and past the last row, so
      // that the products there (with whatever the shifted input holds) add nothing. (An
      // infinite input there makes 0 * inf = NaN: where x holds an Inf, dw may read NaN
      // instead of +-Inf. The step is non-finite either way.)
      float* rows = dy_rows + i * row_floats;
      std::fill(rows, rows + row_floats, 0.0F);
      const float* source = dy + (first + i) * out_image;
      for (std::int64_t o = 0; o < out_channels_; ++o) {
        for (std::int64_t h = 0; h < height; ++h) {
          copy_row(source + (o * height + h) * width,
                   rows + o * layout_.positions + h * layout_.padded_width + layout_.pad_w, width);
        }
      }
    }
    pass(scratch, count, dw);
  }
}

void DirectConv2dWeightGrad::pass(const float* scratch, std::int64_t images, float* dw) const {
  const float* padded_x = scratch;
  const float* dy_rows = scratch + images_per_pass_ * layout_.floats;
  const std::int64_t vectors = layout_.positions / kLanes;
  const std::int64_t row_floats = out_channels_ * layout_.positions;
  const std::int64_t sources = static_cast<std::int64_t>(sources_.size());
  // The zero row stands in for the tiles' rows past the last output or source; their sums are
  // never stored, but reading defined memory keeps them harmless (and sanitizers quiet).
  const float* zero = scratch + zero_row_;
  for (std::int64_t o0 = 0; o0 < padded_outputs_; o0 += kGradOutputs) {
    for (std::int64_t k0 = 0; k0 < sources; k0 += kGradSources) {
      Vec acc[kGradOutputs][kGradSources] = {};
      for (std::int64_t i = 0; i < images; ++i) {
        const float* origin = layout_.origin(padded_x + i * layout_.floats, 0);
        const float* d[kGradOutputs];
        const float* src[kGradSources];
        for (std::int64_t a = 0; a < kGradOutputs; ++a) {
          d[a] = o0 + a < out_channels_ ? dy_rows + i * row_floats + (o0 + a) * layout_.positions
                                        : zero;
        }
        for (std::int64_t b = 0; b < kGradSources; ++b) {
          src[b] = k0 + b < sources ? origin + sources_[static_cast<std::size_t>(k0 + b)] : zero;
        }
        for (std::int64_t v = 0; v < vectors; ++v) {
          Vec dv[kGradOutputs];
#pragma GCC unroll 4
          for (std::int64_t a = 0; a < kGradOutputs; ++a) dv[a] = load(d[a] + v * kLanes);
#pragma GCC unroll 6
          for (std::int64_t b = 0; b < kGradSources; ++b) {
            const Vec xv = load(src[b] + v * kLanes);
#pragma GCC unroll 4
            for (std::int64_t a = 0; a < kGradOutputs; ++a) acc[a][b] += dv[a] * xv;
          }
        }
      }
      for (std::int64_t a = 0; a < kGradOutputs && o0 + a < out_channels_; ++a) {
        for (std::int64_t b = 0; b < kGradSources && k0 + b < sources; ++b) {
          dw[(o0 + a) * weights_per_output_ + k0 + b] += lane_sum(acc[a][b]);
        }
      }
    }
  }
}

}  // namespace aiacc::kernels::detail
