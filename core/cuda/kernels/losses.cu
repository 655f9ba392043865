// Loss kernels (see losses.h): one thread per example (rows are short: classes, or one logit), a fixed-order
// block reduction for the mean.
#include "core/cuda/kernels/loss_kernels.h"

#include "core/cuda/kernels/launch.h"

namespace aiacc::cuda {
namespace {

constexpr int kReduceThreads = 256;

__global__ void softmax_ce_kernel(std::int64_t batch, std::int64_t classes, const float* __restrict__ logits,
                                  const std::int64_t* __restrict__ labels, double smooth_each,
                                  double on_target, double inv_batch, float* __restrict__ dlogits,
                                  double* __restrict__ per_example, unsigned long long* first_bad) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < batch;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const std::int64_t y = labels[i];
    if (y < 0 || y >= classes) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
      per_example[i] = 0.0;
      continue;
    }
    const float* x = logits + i * classes;
    double max_logit = x[0];
    for (std::int64_t c = 1; c < classes; ++c) max_logit = fmax(max_logit, static_cast<double>(x[c]));
    double sum_exp = 0.0, sum_logits = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      sum_exp += exp(static_cast<double>(x[c]) - max_logit);
      sum_logits += static_cast<double>(x[c]);
    }
    const double log_sum_exp = max_logit + log(sum_exp);
    per_example[i] = log_sum_exp - on_target * static_cast<double>(x[y]) - smooth_each * sum_logits;
    if (dlogits != nullptr) {
      float* d = dlogits + i * classes;
      for (std::int64_t c = 0; c < classes; ++c) {
        const double q = smooth_each + (c == y ? on_target : 0.0);
        d[c] = static_cast<float>((exp(static_cast<double>(x[c]) - log_sum_exp) - q) * inv_batch);
      }
    }
  }
}

__global__ void bce_kernel(std::int64_t batch, const float* __restrict__ logits, const float* __restrict__ targets,
                           double inv_batch, float* __restrict__ dlogits, double* __restrict__ per_example,
                           unsigned long long* first_bad) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < batch;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const double t = targets[i];
    if (!(t >= 0.0 && t <= 1.0)) {  // NaN fails both
      atomicMin(first_bad, static_cast<unsigned long long>(i));
      per_example[i] = 0.0;
      continue;
    }
    const double x = logits[i];
    per_example[i] = fmax(x, 0.0) - x * t + log1p(exp(-fabs(x)));
    if (dlogits != nullptr) dlogits[i] = static_cast<float>((1.0 / (1.0 + exp(-x)) - t) * inv_batch);
  }
}

// One block: thread k sums examples k, k + 256, ... in order, then a fixed tree; mean = sum / N.
__global__ void mean_kernel(const double* __restrict__ per_example, std::int64_t batch, double* mean) {
  __shared__ double partial[kReduceThreads];
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < batch; i += kReduceThreads) sum += per_example[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *mean = partial[0] / static_cast<double>(batch);
}

}  // namespace

namespace detail {

void launch_softmax_ce_per_example(std::int64_t batch, std::int64_t classes, const float* logits,
                                   const std::int64_t* labels, double smooth_each, double on_target,
                                   double inv_batch, float* dlogits, double* per_example,
                                   std::uint64_t* first_bad, cudaStream_t stream) {
  softmax_ce_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
      batch, classes, logits, labels, smooth_each, on_target, inv_batch, dlogits, per_example,
      reinterpret_cast<unsigned long long*>(first_bad));
  AIACC_CHECK_LAUNCH();
}

void launch_bce_per_example(std::int64_t batch, const float* logits, const float* targets, double inv_batch,
                            float* dlogits, double* per_example, std::uint64_t* first_bad, cudaStream_t stream) {
  bce_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(batch, logits, targets, inv_batch, dlogits, per_example,
                                                         reinterpret_cast<unsigned long long*>(first_bad));
  AIACC_CHECK_LAUNCH();
}

void launch_mean(const double* per_example, std::int64_t batch, double* mean, cudaStream_t stream) {
  mean_kernel<<<1, kReduceThreads, 0, stream>>>(per_example, batch, mean);
  AIACC_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace aiacc::cuda
