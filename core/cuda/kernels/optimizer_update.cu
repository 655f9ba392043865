// Adam and SGD kernels: one thread per element in a grid-stride loop, the CPU rule's arithmetic.
#include "core/cuda/kernels/optimizer_update.h"

#include "core/cuda/kernels/launch.h"
#include "core/error.h"

namespace aiacc::cuda {
namespace {

__global__ void adam_kernel(float* __restrict__ w, const float* __restrict__ g,
                            float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                            std::int64_t n, optim::AdamStepScalars c) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    float grad = g[i];
    float weight = w[i];
    if (c.decoupled) {
      weight *= c.shrink;
    } else {
      grad += c.wd * weight;
    }
    const float m = exp_avg[i] + c.one_minus_b1 * (grad - exp_avg[i]);
    const float v = c.b2 * exp_avg_sq[i] + c.one_minus_b2 * grad * grad;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    w[i] = weight - c.step_size * (m / (sqrtf(v) / c.correction2_sqrt + c.epsilon));
  }
}

__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g,
                           float* __restrict__ momentum_buf, std::int64_t n, float rate, float wd,
                           float mu, float keep, bool first, bool nesterov) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{blockDim.x} * gridDim.x) {
    const float d = g[i] + wd * w[i];
    if (momentum_buf == nullptr) {
      w[i] -= rate * d;
      continue;
    }
    const float buf = first ? d : mu * momentum_buf[i] + keep * d;
    momentum_buf[i] = buf;
    w[i] -= rate * (nesterov ? d + mu * buf : buf);
  }
}

}  // namespace

void launch_adam_update(const optim::AdamRule& rule, float* w, const float* g, float* exp_avg,
                        float* exp_avg_sq, std::int64_t n, std::int64_t step, double lr,
                        cudaStream_t stream) {
  const optim::AdamStepScalars scalars = rule.step_scalars(step, lr);
  if (n <= 0) return;
  adam_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(w, g, exp_avg, exp_avg_sq, n,
                                                                      scalars);
  AIACC_CHECK_LAUNCH();
}

void launch_sgd_update(const optim::SgdRule& rule, float* w, const float* g, float* momentum_buf,
                       std::int64_t n, std::int64_t step, double lr, cudaStream_t stream) {
  const bool with_momentum = rule.state_per_element() > 0;
  if (with_momentum && momentum_buf == nullptr) {
    throw InternalError("launch_sgd_update: momentum without a momentum buffer");
  }
  if (n <= 0) return;
  sgd_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      w, g, with_momentum ? momentum_buf : nullptr, n, static_cast<float>(lr),
      static_cast<float>(rule.weight_decay), static_cast<float>(rule.momentum),
      static_cast<float>(1.0 - rule.dampening), step <= 1, rule.nesterov);
  AIACC_CHECK_LAUNCH();
}

}  // namespace aiacc::cuda
