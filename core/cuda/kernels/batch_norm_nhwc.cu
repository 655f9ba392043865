// Channels-last batch norm: column reductions over [M, C] by 2-D blocks (32 channels wide, so a
// warp reads contiguous channels of one row; 8 rows deep), partial sums in fp32 per thread and
// fp64 across threads and blocks, then per-channel finishing and one element-wise pass.
#include "core/cuda/kernels/batch_norm_nhwc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

constexpr int kTileChannels = 32;
constexpr int kTileRows = 8;

__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ inline float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ inline void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ inline void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ inline void store(__half* p, std::int64_t i, float v) { p[i] = __float2half_rn(v); }

// Blocks: x over channel tiles, y over row slices. How many row slices: enough blocks to fill
// the GPU (4 per SM on 132 SMs), each slice at least 64 rows.
dim3 reduction_grid(std::int64_t rows, std::int64_t channels) {
  const std::int64_t tiles = (channels + kTileChannels - 1) / kTileChannels;
  const std::int64_t slices = std::clamp<std::int64_t>(528 / tiles, 1, std::max<std::int64_t>(rows / 64, 1));
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<std::int64_t>(slices, 65535)));
}

// Sums of (x - shift) and (x - shift)^2 per channel into acc[0..C) and acc[C..2C) (fp64,
// zeroed before). The shift (row 0's value) keeps the one-pass variance free of cancellation
// when a channel's mean is large against its spread.
template <class D>
__global__ void stats_kernel(const D* x, std::int64_t rows, std::int64_t channels, double* acc) {
  __shared__ float partial[2][kTileRows][kTileChannels];
  const std::int64_t c = blockIdx.x * std::int64_t{kTileChannels} + threadIdx.x;
  float sum = 0.0f, squares = 0.0f;
  if (c < channels) {
    const float shift = load(x, c);
    for (std::int64_t r = blockIdx.y * std::int64_t{kTileRows} + threadIdx.y; r < rows;
         r += std::int64_t{gridDim.y} * kTileRows) {
      const float v = load(x, r * channels + c) - shift;
      sum += v;
      squares += v * v;
    }
  }
  partial[0][threadIdx.y][threadIdx.x] = sum;
  partial[1][threadIdx.y][threadIdx.x] = squares;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    double s = 0.0, q = 0.0;
    for (int k = 0; k < kTileRows; ++k) {
      s += partial[0][k][threadIdx.x];
      q += partial[1][k][threadIdx.x];
    }
    atomicAdd(acc + c, s);
    atomicAdd(acc + channels + c, q);
  }
}

// Backward sums per channel: sum(dy) into acc[0..C), sum(dy * (x - mean)) into acc[C..2C).
// dy, or 0 where a fused ReLU's output is not positive.
template <bool kRelu, class D>
__device__ inline float grad_at(const D* dy, const D* relu_output, std::int64_t i) {
  if (kRelu && !(load(relu_output, i) > 0.0f)) return 0.0f;
  return load(dy, i);
}

template <bool kRelu, class D>
__global__ void backward_sums_kernel(const D* x, const D* dy, const D* relu_output, const float* mean,
                                     std::int64_t rows, std::int64_t channels, double* acc) {
  __shared__ float partial[2][kTileRows][kTileChannels];
  const std::int64_t c = blockIdx.x * std::int64_t{kTileChannels} + threadIdx.x;
  float sum = 0.0f, dot = 0.0f;
  if (c < channels) {
    const float m = mean[c];
    for (std::int64_t r = blockIdx.y * std::int64_t{kTileRows} + threadIdx.y; r < rows;
         r += std::int64_t{gridDim.y} * kTileRows) {
      const std::int64_t i = r * channels + c;
      const float g = grad_at<kRelu>(dy, relu_output, i);
      sum += g;
      dot += g * (load(x, i) - m);
    }
  }
  partial[0][threadIdx.y][threadIdx.x] = sum;
  partial[1][threadIdx.y][threadIdx.x] = dot;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    double s = 0.0, d = 0.0;
    for (int k = 0; k < kTileRows; ++k) {
      s += partial[0][k][threadIdx.x];
      d += partial[1][k][threadIdx.x];
    }
    atomicAdd(acc + c, s);
    atomicAdd(acc + channels + c, d);
  }
}

// Per channel: statistics from the sums, the running update, and y = x * scale + bias's terms.
template <class D>
__global__ void finish_stats_kernel(const D* x, const double* acc, const float* gamma, const float* beta,
                                    float* running_mean, float* running_var, float* save_mean, float* save_inv_std,
                                    float* scale, float* bias, std::int64_t rows, std::int64_t channels,
                                    double momentum, double eps) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  const double count = static_cast<double>(rows);
  const double shifted_mean = acc[c] / count;
  const double var = fmax(acc[channels + c] / count - shifted_mean * shifted_mean, 0.0);
  const double mean = static_cast<double>(load(x, c)) + shifted_mean;
  const double inv_std = 1.0 / sqrt(var + eps);
  save_mean[c] = static_cast<float>(mean);
  save_inv_std[c] = static_cast<float>(inv_std);
  running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * var * count / (count - 1.0));
  const double s = gamma[c] * inv_std;
  scale[c] = static_cast<float>(s);
  bias[c] = static_cast<float>(beta[c] - mean * s);
}

__global__ void eval_terms_kernel(const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, float* scale, float* bias, std::int64_t channels,
                                  double eps) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  const double s = gamma[c] / sqrt(static_cast<double>(running_var[c]) + eps);
  scale[c] = static_cast<float>(s);
  bias[c] = static_cast<float>(beta[c] - running_mean[c] * s);
}

template <bool kRelu, class D>
__global__ void apply_kernel(const D* x, const float* scale, const float* bias, D* y, std::int64_t count,
                             std::int64_t channels) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t c = i % channels;
    const float v = load(x, i) * scale[c] + bias[c];
    store(y, i, kRelu && v < 0.0f ? 0.0f : v);  // `<` keeps NaN, as the ReLU kernels do
  }
}

template <class D>
void launch_apply(bool relu, const D* x, const float* scale, const float* bias, D* y, std::int64_t count,
                  std::int64_t channels, cudaStream_t stream) {
  if (relu) {
    apply_kernel<true, D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(x, scale, bias, y, count, channels);
  } else {
    apply_kernel<false, D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(x, scale, bias, y, count, channels);
  }
  AIACC_CHECK_LAUNCH();
}

// Per channel: dgamma, dbeta, and dx = k (dy - a - (x - mean) b)'s terms k, a, b.
__global__ void finish_backward_kernel(const double* acc, const float* gamma, const float* inv_std, float* dgamma,
                                       float* dbeta, float* terms, std::int64_t rows, std::int64_t channels) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  const double count = static_cast<double>(rows);
  const double istd = inv_std[c];
  dbeta[c] = static_cast<float>(acc[c]);
  dgamma[c] = static_cast<float>(acc[channels + c] * istd);
  terms[c] = static_cast<float>(gamma[c] * istd);                                 // k
  terms[channels + c] = static_cast<float>(acc[c] / count);                       // a
  terms[2 * channels + c] = static_cast<float>(acc[channels + c] / count * istd * istd);  // b
}

template <bool kRelu, class D>
__global__ void backward_apply_kernel(const D* x, const D* dy, const D* relu_output, const float* mean,
                                      const float* terms, D* dx, std::int64_t count, std::int64_t channels) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t c = i % channels;
    const float centred = load(x, i) - mean[c];
    const float g = grad_at<kRelu>(dy, relu_output, i);
    store(dx, i, terms[c] * (g - terms[channels + c] - centred * terms[2 * channels + c]));
  }
}

unsigned channel_blocks(std::int64_t channels) { return static_cast<unsigned>((channels + 255) / 256); }

// The scratch's layout: accumulators first (fp64), then floats.
double* accumulators(void* scratch) { return static_cast<double*>(scratch); }
float* floats(void* scratch, std::int64_t channels) {
  return reinterpret_cast<float*>(static_cast<double*>(scratch) + 4 * channels);
}

}  // namespace

std::size_t batch_norm_nhwc_scratch_bytes(std::int64_t channels) {
  return static_cast<std::size_t>(channels) * (4 * sizeof(double) + 3 * sizeof(float));
}

template <class T>
void launch_batch_norm_nhwc_forward_train(const T* x, const float* gamma, const float* beta, T* y,
                                          float* running_mean, float* running_var, float* save_mean,
                                          float* save_inv_std, std::int64_t rows, std::int64_t channels,
                                          const kernels::BatchNormOptions& options, bool relu, void* scratch,
                                          cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  const D* dx = reinterpret_cast<const D*>(x);
  double* acc = accumulators(scratch);
  float* scale = floats(scratch, channels);
  float* bias = scale + channels;
  AIACC_CUDA_CHECK(cudaMemsetAsync(acc, 0, 2 * static_cast<std::size_t>(channels) * sizeof(double), stream));
  stats_kernel<D><<<reduction_grid(rows, channels), dim3(kTileChannels, kTileRows), 0, stream>>>(dx, rows, channels,
                                                                                                 acc);
  AIACC_CHECK_LAUNCH();
  finish_stats_kernel<D><<<channel_blocks(channels), 256, 0, stream>>>(
      dx, acc, gamma, beta, running_mean, running_var, save_mean, save_inv_std, scale, bias, rows, channels,
      options.momentum, options.eps);
  AIACC_CHECK_LAUNCH();
  launch_apply(relu, dx, scale, bias, reinterpret_cast<D*>(y), rows * channels, channels, stream);
}

template <class T>
void launch_batch_norm_nhwc_forward_eval(const T* x, const float* gamma, const float* beta,
                                         const float* running_mean, const float* running_var, T* y,
                                         std::int64_t rows, std::int64_t channels,
                                         const kernels::BatchNormOptions& options, bool relu, void* scratch,
                                         cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  float* scale = floats(scratch, channels);
  float* bias = scale + channels;
  eval_terms_kernel<<<channel_blocks(channels), 256, 0, stream>>>(gamma, beta, running_mean, running_var, scale, bias,
                                                                  channels, options.eps);
  AIACC_CHECK_LAUNCH();
  launch_apply(relu, reinterpret_cast<const D*>(x), scale, bias, reinterpret_cast<D*>(y), rows * channels, channels,
               stream);
}

template <bool kRelu, class D>
static void launch_backward(const D* in, const D* grad, const D* relu_output, const float* save_mean,
                     const float* gamma, const float* save_inv_std, float* dgamma, float* dbeta, D* dx,
                     std::int64_t rows, std::int64_t channels, void* scratch, cudaStream_t stream) {
  double* acc = accumulators(scratch);
  float* terms = floats(scratch, channels);
  AIACC_CUDA_CHECK(cudaMemsetAsync(acc, 0, 2 * static_cast<std::size_t>(channels) * sizeof(double), stream));
  backward_sums_kernel<kRelu, D><<<reduction_grid(rows, channels), dim3(kTileChannels, kTileRows), 0, stream>>>(
      in, grad, relu_output, save_mean, rows, channels, acc);
  AIACC_CHECK_LAUNCH();
  finish_backward_kernel<<<channel_blocks(channels), 256, 0, stream>>>(acc, gamma, save_inv_std, dgamma, dbeta, terms,
                                                                       rows, channels);
  AIACC_CHECK_LAUNCH();
  const std::int64_t count = rows * channels;
  backward_apply_kernel<kRelu, D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
      in, grad, relu_output, save_mean, terms, dx, count, channels);
  AIACC_CHECK_LAUNCH();
}

template <class T>
void launch_batch_norm_nhwc_backward(const T* x, const T* dy, const T* relu_output, const float* gamma,
                                     const float* save_mean, const float* save_inv_std, T* dx, float* dgamma,
                                     float* dbeta, std::int64_t rows, std::int64_t channels, void* scratch,
                                     cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  using D = typename detail::DeviceType<T>::type;
  const D* in = reinterpret_cast<const D*>(x);
  const D* grad = reinterpret_cast<const D*>(dy);
  D* out = reinterpret_cast<D*>(dx);
  if (relu_output != nullptr) {
    launch_backward<true>(in, grad, reinterpret_cast<const D*>(relu_output), save_mean, gamma, save_inv_std, dgamma,
                          dbeta, out, rows, channels, scratch, stream);
  } else {
    launch_backward<false>(in, grad, static_cast<const D*>(nullptr), save_mean, gamma, save_inv_std, dgamma, dbeta,
                           out, rows, channels, scratch, stream);
  }
}

#define AIACC_INSTANTIATE(T)                                                                                      \
  template void launch_batch_norm_nhwc_forward_train<T>(const T*, const float*, const float*, T*, float*, float*, \
                                                        float*, float*, std::int64_t, std::int64_t,               \
                                                        const kernels::BatchNormOptions&, bool, void*,            \
                                                        cudaStream_t);                                            \
  template void launch_batch_norm_nhwc_forward_eval<T>(const T*, const float*, const float*, const float*,        \
                                                       const float*, T*, std::int64_t, std::int64_t,              \
                                                       const kernels::BatchNormOptions&, bool, void*,             \
                                                       cudaStream_t);                                             \
  template void launch_batch_norm_nhwc_backward<T>(const T*, const T*, const T*, const float*, const float*,      \
                                                   const float*, T*, float*, float*, std::int64_t, std::int64_t,  \
                                                   void*, cudaStream_t);
AIACC_INSTANTIATE(float)
AIACC_INSTANTIATE(BFloat16)
AIACC_INSTANTIATE(Half)
#undef AIACC_INSTANTIATE

}  // namespace aiacc::cuda
