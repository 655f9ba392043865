// Dense optimiser steps on the GPU, element for element the CPU rules of core/optim (AdamRule,
// SgdRule), with the same per-step scalars computed on the host. All pointers are device
// memory of n floats; each launcher queues one kernel on `stream` (CudaError on a bad launch).
// Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/optim/adam.h"
#include "core/optim/sgd.h"

namespace aiacc::cuda {

// AdamRule::update on device memory; `step` 1-based.
void launch_adam_update(const optim::AdamRule& rule, float* w, const float* g, float* exp_avg,
                        float* exp_avg_sq, std::int64_t n, std::int64_t step, double lr,
                        cudaStream_t stream);

// SgdRule::update on device memory; `momentum_buf` may be null when rule.momentum is 0.
void launch_sgd_update(const optim::SgdRule& rule, float* w, const float* g, float* momentum_buf,
                       std::int64_t n, std::int64_t step, double lr, cudaStream_t stream);

}  // namespace aiacc::cuda
