// How a 4-D activation tensor is laid out in memory: NCHW (PyTorch's default, core/kernels'
// only layout) or NHWC ("channels last", the layout Tensor Cores read without transposes).
#pragma once

namespace aiacc::cuda {

enum class TensorLayout { nchw, nhwc };

inline const char* layout_name(TensorLayout layout) {
  return layout == TensorLayout::nhwc ? "nhwc" : "nchw";
}

}  // namespace aiacc::cuda
