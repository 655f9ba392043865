// 2-D pooling on raw NCHW row-major pointers: max pooling, average pooling and global average
// pooling, forward and backward. Every (image, channel) plane is independent, so all kernels
// are parallel over the N*C planes with OpenMP.
// Legend: N = batch, C = channels, H x W = input height x width, KH x KW = window,
//         OH x OW = output height x width.
// Shapes: x [N, C, H, W], y [N, C, OH, OW]; global pooling gives y [N, C].
#pragma once

#include <cstdint>
#include <string>

namespace aiacc::kernels {

struct Pool2dGeometry {
  std::int64_t batch = 0;     // N
  std::int64_t channels = 0;  // C
  std::int64_t height = 0;    // H
  std::int64_t width = 0;     // W
  std::int64_t kernel_h = 1;  // KH
  std::int64_t kernel_w = 1;  // KW
  std::int64_t stride_h = 1;
  std::int64_t stride_w = 1;
  std::int64_t pad_h = 0;  // implicit padding above/below (-inf for max, 0 for average)
  std::int64_t pad_w = 0;

  // Floor mode, like PyTorch's default ceil_mode=false.
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  std::int64_t input_numel() const { return batch * channels * height * width; }
  std::int64_t output_numel() const { return batch * channels * out_height() * out_width(); }
  // Throws InternalError unless dimensions are positive and 0 <= pad <= kernel / 2 (PyTorch's
  // rule; it guarantees every window holds at least one real input element).
  void validate() const;
  std::string str() const;
};

// Max pooling. y gets each window's maximum; argmax [N, C, OH, OW] gets the index inside the
// input plane (ih * W + iw) it came from, for the backward pass.
// Ties: the FIRST maximum in scan order (rows top to bottom, then columns left to right) wins,
// so exactly one input receives each output's gradient. NaN propagates (a NaN in a window
// makes the output NaN; the first NaN is the argmax). Padding never wins.
template <class T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, std::int64_t* argmax);

// dx [N, C, H, W] (OVERWRITTEN) = dy routed to the argmax positions from the forward pass;
// inputs that are the argmax of several overlapping windows get the sum.
template <class T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const std::int64_t* argmax, T* dx);

// Average pooling with count_include_pad=true (PyTorch's default): every output is the window
// sum divided by KH*KW, padding counted as zeros.
template <class T>
void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y);

// dx (OVERWRITTEN): each dy spread evenly, dy / (KH*KW), over its window's real inputs.
template <class T>
void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx);

// Global average pooling: y[n, c] = mean over H*W of x[n, c, :, :]. `spatial` = H*W.
template <class T>
void global_avg_pool_forward(std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                             const T* x, T* y);

// dx[n, c, :, :] (OVERWRITTEN) = dy[n, c] / spatial.
template <class T>
void global_avg_pool_backward(std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                              const T* dy, T* dx);

}  // namespace aiacc::kernels
