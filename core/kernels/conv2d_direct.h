// Direct convolution for "same" stride-1 convolutions in float (internal to conv2d.cc).
//
// im2col + GEMM copies every input value KH*KW times into a column matrix, and the GEMM packs
// that matrix again: for the small channel counts of CIFAR-style ResNets (16 to 64) those two
// copies cost as much as the multiply-adds. The direct kernels instead read each tap straight
// from a zero-padded copy of the image: in the padded plane, output (h, w) and its input for tap
// (ki, kj) are a fixed distance apart, so a run of consecutive outputs (padding columns
// included, and discarded afterwards) reads one contiguous run of the input per tap.
//
// - DirectConv2d: a register tile of 8 output channels x 3 vectors of positions accumulates
//   over input channels and taps (one broadcast weight per channel, one load per vector). The
//   backward-data pass of a same stride-1 convolution is such a convolution of dy with the
//   kernel flipped and its channel axes swapped, so the same kernel serves both.
// - DirectConv2dWeightGrad: dw[o, c, tap] is a dot product over positions of dy row o and the
//   shifted input row (c, tap); a register tile of 4 x 6 such products accumulates over the
//   positions of several images before its lanes are summed.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/conv2d.h"

namespace aiacc::kernels::detail {

// Where a zero-padded image and the rows of positions computed from it lie in memory. Only for
// g.is_same_stride1() (InternalError otherwise), like the kernels below that use it.
struct PaddedLayout {
  PaddedLayout(const Conv2dGeometry& g, std::int64_t channels);

  std::int64_t channels, height, width, pad_h, pad_w;
  std::int64_t padded_width, padded_plane;
  std::int64_t lead;       // zero floats before channel 0 (reads reach pad_w before a plane)
  std::int64_t positions;  // H * padded width, in whole vectors: output (h, w) is at
                           // h * padded_width + pad_w + w
  std::int64_t floats;     // of one padded image, with every float a tile may read
  std::vector<std::int64_t> tap_offsets;  // per tap (ki, kj), from an output to its input

  // padded <- image [channels, H, W] with zero borders; writes all `floats` floats.
  void pad(const float* image, float* padded) const;
  // Where position 0 of channel `channel` reads tap offset 0.
  const float* origin(const float* padded, std::int64_t channel) const {
    return padded + lead + channel * padded_plane + pad_h * padded_width;
  }
};

class DirectConv2d {
 public:
  // Prepares a convolution of `g` (forward), or its backward-data pass when `transposed`: then
  // the kernel maps g.out_channels inputs (dy) to g.in_channels outputs (dx).
  DirectConv2d(const Conv2dGeometry& g, const float* w, bool transposed);

  // Floats of scratch one image needs (one slot per concurrent caller).
  std::int64_t scratch_floats() const { return layout_.floats + outputs_ * layout_.positions; }

  // out [outputs, H, W] = conv(in [inputs, H, W]) (+ bias[o] when bias is non-null).
  void run(const float* in, const float* bias, float* out, float* scratch) const;

 private:
  void accumulate(const float* padded, float* rows) const;

  std::int64_t inputs_, outputs_;
  PaddedLayout layout_;
  std::int64_t channel_blocks_;
  std::vector<float> packed_;  // [channel block][input][tap][8 outputs], zero-padded
};

class DirectConv2dWeightGrad {
 public:
  explicit DirectConv2dWeightGrad(const Conv2dGeometry& g);

  std::int64_t scratch_floats() const;

  // dw [O, C, KH, KW] += the weight gradient of `images` images from x [images, C, H, W] and
  // dy [images, O, H, W].
  void accumulate(const float* x, const float* dy, std::int64_t images, float* dw,
                  float* scratch) const;

 private:
  // One pass over the images that accumulate() laid out in scratch.
  void pass(const float* scratch, std::int64_t images, float* dw) const;

  std::int64_t out_channels_;
  PaddedLayout layout_;
  std::int64_t images_per_pass_;       // laid out together in scratch, summed in registers
  std::int64_t weights_per_output_;    // C * KH * KW
  std::int64_t padded_outputs_;        // out_channels rounded to the tile, extra rows zero
  std::vector<std::int64_t> sources_;  // per (c, tap): offset of its row from origin(0)
  std::int64_t zero_row_;              // offset in scratch of positions zero floats
};

}  // namespace aiacc::kernels::detail
