// Layout and precision changes of [N, C, S] activations on the GPU (NCHW is [N, C, S], "channels
// last" NHWC is [N, S, C]), global average pooling in either layout, and the element-wise joins
// in bf16: what the mixed-precision (bf16, channels-last) path needs beyond cuDNN. fp32 to bf16
// rounds to nearest even (core/util/half.h's rule), bf16 to fp32 is exact. Each launcher queues
// one kernel on `stream`. Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/half.h"

namespace aiacc::cuda {

// out = in as [N, C, S] values, each side in its own layout (channels_last: [N, S, C]) and
// storage type. Instantiated for float to and from BFloat16 and Half, and float -> float.
// The same call turns a weight [O, C, KH, KW] into [O, KH, KW, C] (N = O, S = KH * KW).
template <class In, class Out>
void launch_convert_layout(const In* in, bool in_channels_last, Out* out, bool out_channels_last,
                           std::int64_t batch, std::int64_t channels, std::int64_t spatial, cudaStream_t stream);

// y[n, c] (f32) = mean over s of x[n, c, s]; x float, BFloat16 or Half in either layout. Sums in fp32
// in index order.
template <class In>
void launch_global_avg_pool_forward(const In* x, bool channels_last, float* y, std::int64_t batch,
                                    std::int64_t channels, std::int64_t spatial, cudaStream_t stream);
// dx[n, c, s] = dy[n, c] / spatial, dx in its layout and storage type.
template <class Out>
void launch_global_avg_pool_backward_any(const float* dy, Out* dx, bool channels_last, std::int64_t batch,
                                         std::int64_t channels, std::int64_t spatial, cudaStream_t stream);

// bf16 y = a + b and y = max(a + b, 0), summed in fp32 and rounded once; y may equal a or b.
void launch_add_bf16(const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t count, cudaStream_t stream);
void launch_add_relu_bf16(const BFloat16* a, const BFloat16* b, BFloat16* y, std::int64_t count,
                          cudaStream_t stream);
// The same in fp16 (one value per access).
void launch_add_f16(const Half* a, const Half* b, Half* y, std::int64_t count, cudaStream_t stream);
void launch_add_relu_f16(const Half* a, const Half* b, Half* y, std::int64_t count, cudaStream_t stream);

}  // namespace aiacc::cuda
