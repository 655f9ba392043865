// 2-D convolution (cross-correlation, like PyTorch's Conv2d; stride and zero padding, no groups
// or dilation) on raw NCHW row-major pointers: forward, backward-data, backward-weight, bias.
// Legend: N = batch, C = in_channels, H x W = input height x width, O = out_channels,
//         KH x KW = kernel, OH x OW = output height x width, K = C*KH*KW, P = OH*OW.
// Shapes: x [N, C, H, W], w [O, C, KH, KW], b [O], y [N, O, OH, OW].
// Algorithm: im2col + GEMM per image (1x1 stride-1 unpadded convolutions skip im2col), except
// float stride-1 "same" convolutions on planes of 64+ pixels on AVX-512 machines, where direct
// kernels that read the taps from a zero-padded image are faster (conv2d_direct.h; the choice,
// by channel counts and plane size, is in conv2d.cc). With at
// least as many images as threads the batch is split across OpenMP threads in chunks (each GEMM
// then runs single-threaded); smaller batches run image by image with Eigen's multi-threaded
// GEMM.
#pragma once

#include <cstdint>
#include <string>

namespace aiacc::kernels {

struct Conv2dGeometry {
  std::int64_t batch = 0;         // N
  std::int64_t in_channels = 0;   // C
  std::int64_t height = 0;        // H
  std::int64_t width = 0;         // W
  std::int64_t out_channels = 0;  // O
  std::int64_t kernel_h = 1;      // KH
  std::int64_t kernel_w = 1;      // KW
  std::int64_t stride_h = 1;
  std::int64_t stride_w = 1;
  std::int64_t pad_h = 0;  // zero rows added above and below
  std::int64_t pad_w = 0;  // zero columns added left and right

  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  std::int64_t input_numel() const { return batch * in_channels * height * width; }
  std::int64_t output_numel() const { return batch * out_channels * out_height() * out_width(); }
  std::int64_t weight_numel() const { return out_channels * in_channels * kernel_h * kernel_w; }
  // True when the convolution is a plain per-pixel matrix product (no im2col needed).
  bool is_pointwise() const;
  // True for stride 1 with "same" padding: the output is as large as the input (which takes
  // an odd kernel padded by half its size on each side).
  bool is_same_stride1() const;
  // Throws InternalError unless dimensions are positive, padding is non-negative and the
  // padded input is at least as large as the kernel.
  void validate() const;
  std::string str() const;  // "N=2 C=3 H=5 W=7 O=4 K=3x3 s=1x1 p=1x1"
};

// y = conv(x, w) + b. b may be null (no bias). y is overwritten. Multi-threaded, blocking.
template <class T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* b, T* y);

// dx [N, C, H, W] = dL/dx given dy = dL/dy [N, O, OH, OW] and w. dx is overwritten.
template <class T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* w, const T* dy, T* dx);

// dw [O, C, KH, KW] = dL/dw given x and dy, summed over the batch. dw is overwritten.
// Per-chunk partial sums are combined in a fixed order, so results are deterministic for a
// given thread count.
template <class T>
void conv2d_backward_weight(const Conv2dGeometry& g, const T* x, const T* dy, T* dw);

// db [O] = sum over N, OH, OW of dy (accumulated in double). db is overwritten.
template <class T>
void conv2d_backward_bias(const Conv2dGeometry& g, const T* dy, T* db);

}  // namespace aiacc::kernels
