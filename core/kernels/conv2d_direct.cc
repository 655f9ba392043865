// Direct same/stride-1 convolution in float (see conv2d_direct.h).
#include "core/kernels/conv2d_direct.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace aiacc::kernels::detail {
namespace {

// GCC/Clang vector extension: one AVX-512 register where the target has it, split into
// narrower registers by the compiler elsewhere, so the kernel stays portable.
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

}  // namespace

bool DirectConv2d::applies(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.kernel_h % 2 == 1 && g.kernel_w % 2 == 1 &&
         g.pad_h == g.kernel_h / 2 && g.pad_w == g.kernel_w / 2;
}

DirectConv2d::DirectConv2d(const Conv2dGeometry& g, const float* w, bool transposed)
    : inputs_(transposed ? g.out_channels : g.in_channels),
      outputs_(transposed ? g.in_channels : g.out_channels),
      height_(g.height),
      width_(g.width) {
  AIACC_CHECK(applies(g), "direct convolution needs stride 1 and same padding: {}", g.str());
  const std::int64_t kh = g.kernel_h, kw = g.kernel_w, ph = g.pad_h, pw = g.pad_w;
  padded_width_ = width_ + 2 * pw;
  padded_plane_ = (height_ + 2 * ph) * padded_width_;
  lead_ = round_up(pw, kLanes);
  positions_ = round_up(height_ * padded_width_, kLanes);
  channel_blocks_ = (outputs_ + kTileChannels - 1) / kTileChannels;
  // The last tile of the last channel reads up to ph rows and pw columns past its plane's
  // interior, and positions_ past the first output: all of it must be allocated (and zero).
  padded_floats_ = lead_ + (inputs_ - 1) * padded_plane_ + 2 * ph * padded_width_ + pw +
                   positions_ + kLanes;
  padded_floats_ = std::max(padded_floats_, lead_ + inputs_ * padded_plane_);
  scratch_floats_ = padded_floats_ + outputs_ * positions_;

  const std::int64_t taps = kh * kw;
  for (std::int64_t ki = 0; ki < kh; ++ki) {
    for (std::int64_t kj = 0; kj < kw; ++kj) {
      tap_offsets_.push_back((ki - ph) * padded_width_ + (kj - pw));
    }
  }
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

void DirectConv2d::pad_input(const float* in, float* padded) const {
  const std::int64_t pw = (padded_width_ - width_) / 2;
  const std::int64_t ph = (padded_plane_ / padded_width_ - height_) / 2;
  std::fill(padded, padded + lead_, 0.0F);
  for (std::int64_t c = 0; c < inputs_; ++c) {
    float* plane = padded + lead_ + c * padded_plane_;
    const float* source = in + c * height_ * width_;
    std::fill(plane, plane + ph * padded_width_ + pw, 0.0F);
    for (std::int64_t h = 0; h < height_; ++h) {
      float* row = plane + (h + ph) * padded_width_ + pw;
      std::copy(source + h * width_, source + (h + 1) * width_, row);
      // The right padding of this row and the left padding of the next are adjacent.
      const std::int64_t gap = h + 1 < height_ ? 2 * pw : pw + ph * padded_width_;
      std::fill(row + width_, row + width_ + gap, 0.0F);
    }
  }
  const std::int64_t used = lead_ + inputs_ * padded_plane_;
  std::fill(padded + used, padded + padded_floats_, 0.0F);
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
  const std::int64_t taps = static_cast<std::int64_t>(tap_offsets_.size());
  const std::int64_t ph = (padded_plane_ / padded_width_ - height_) / 2;
  const float* base = padded + lead_ + ph * padded_width_;
  for (std::int64_t block = 0; block < channel_blocks_; ++block) {
    const std::int64_t lanes = std::min(kTileChannels, outputs_ - block * kTileChannels);
    const float* weights = packed_.data() + block * inputs_ * taps * kTileChannels;
    float* block_rows = rows + block * kTileChannels * positions_;
    // Full tiles, then one narrower tile for the last one or two vectors.
    std::int64_t first = 0;
    for (; first + kTilePositions <= positions_; first += kTilePositions) {
      accumulate_tile<kTileVectors>(base + first, inputs_, padded_plane_, tap_offsets_.data(),
                                    taps, weights, lanes, block_rows + first, positions_);
    }
    const std::int64_t rest = (positions_ - first) / kLanes;
    if (rest == 2) {
      accumulate_tile<2>(base + first, inputs_, padded_plane_, tap_offsets_.data(), taps,
                         weights, lanes, block_rows + first, positions_);
    } else if (rest == 1) {
      accumulate_tile<1>(base + first, inputs_, padded_plane_, tap_offsets_.data(), taps,
                         weights, lanes, block_rows + first, positions_);
    }
  }
}

void DirectConv2d::run(const float* in, const float* bias, float* out, float* scratch) const {
  float* padded = scratch;
  float* rows = scratch + padded_floats_;
  pad_input(in, padded);
  accumulate(padded, rows);
  // Keep the interior columns of each row: output (h, w) sits at h * padded width + pw + w.
  const std::int64_t pw = (padded_width_ - width_) / 2;
  for (std::int64_t o = 0; o < outputs_; ++o) {
    const float* row = rows + o * positions_ + pw;
    float* plane = out + o * height_ * width_;
    const float b = bias != nullptr ? bias[o] : 0.0F;
    for (std::int64_t h = 0; h < height_; ++h) {
      const float* source = row + h * padded_width_;
      float* target = plane + h * width_;
      for (std::int64_t x = 0; x < width_; ++x) target[x] = source[x] + b;
    }
  }
}

}  // namespace aiacc::kernels::detail
