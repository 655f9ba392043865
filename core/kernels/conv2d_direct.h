// Direct convolution for "same" stride-1 convolutions in float (internal to conv2d.cc).
//
// im2col + GEMM copies every input value KH*KW times into a column matrix, and the GEMM packs
// that matrix again: for the small channel counts of CIFAR-style ResNets (16 to 64) those two
// copies cost as much as the multiply-adds. The direct kernel instead reads each tap straight
// from a zero-padded copy of the image: in the padded plane, output (h, w) and its input for tap
// (ki, kj) are a fixed distance apart, so a run of consecutive outputs (padding columns
// included, and discarded afterwards) reads one contiguous run of the input per tap. A register
// tile of kTileChannels output channels x kTileVectors vectors of positions accumulates over
// channels and taps, one broadcast weight per channel and one load per vector.
//
// The backward-data pass of a same stride-1 convolution is such a convolution of dy with the
// kernel flipped and its channel axes swapped, so the same kernel serves both.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/conv2d.h"

namespace aiacc::kernels::detail {

class DirectConv2d {
 public:
  // True for stride 1 with "same" padding (an odd kernel padded by half its size), where the
  // direct kernel applies.
  static bool applies(const Conv2dGeometry& g);

  // Prepares a convolution of `g` (forward), or its backward-data pass when `transposed`: then
  // the kernel maps g.out_channels inputs (dy) to g.in_channels outputs (dx).
  DirectConv2d(const Conv2dGeometry& g, const float* w, bool transposed);

  // Floats of scratch one image needs (one slot per concurrent caller).
  std::int64_t scratch_floats() const { return scratch_floats_; }

  // out [outputs, H, W] = conv(in [inputs, H, W]) (+ bias[o] when bias is non-null).
  void run(const float* in, const float* bias, float* out, float* scratch) const;

 private:
  void pad_input(const float* in, float* padded) const;
  void accumulate(const float* padded, float* rows) const;

  std::int64_t inputs_, outputs_, height_, width_;
  std::int64_t padded_width_, padded_plane_, lead_;  // lead_: zero floats before channel 0
  std::int64_t positions_;                           // H * padded width, whole vectors
  std::int64_t channel_blocks_;
  std::vector<std::int64_t> tap_offsets_;  // per tap, from an output to its input
  std::vector<float> packed_;  // [channel block][input][tap][kTileChannels], zero-padded
  std::int64_t padded_floats_, scratch_floats_;
};

}  // namespace aiacc::kernels::detail
