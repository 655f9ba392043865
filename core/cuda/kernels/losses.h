// Losses on the GPU: the math of core/kernels/losses.h (softmax cross-entropy with optional
// label smoothing; binary cross-entropy with logits), per example in double like the CPU, and
// the batch mean summed in a fixed order, so a run repeats bit for bit. Nothing is read back:
// the mean loss and the first bad label stay on the device until read_loss() (which syncs),
// so a step need not wait for its loss. Pointers are device memory. Built only with CUDA (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/memory/caching_allocator.h"

namespace aiacc::cuda {

// Where a loss launch leaves its results: the mean loss (double) and the smallest index of an
// example with a bad label or target (all ones when every one is good). Device memory from the
// caching allocator, on the launch's stream.
struct LossOnDevice {
  memory::PooledBuffer mean;       // one double
  memory::PooledBuffer first_bad;  // one int64
  std::int64_t batch = 0;
  const char* what = "";           // "softmax cross-entropy", for read_loss's message
};

// logits [N, C], labels [N]; dlogits [N, C] overwritten (null: loss only). N, C >= 1.
LossOnDevice launch_softmax_cross_entropy(std::int64_t batch, std::int64_t classes, const float* logits,
                                          const std::int64_t* labels, double label_smoothing,
                                          float* dlogits, int device, cudaStream_t stream);

// logits, targets, dlogits [N] (dlogits overwritten; null: loss only). N >= 1.
LossOnDevice launch_binary_cross_entropy_with_logits(std::int64_t batch, const float* logits,
                                                     const float* targets, float* dlogits, int device,
                                                     cudaStream_t stream);

// Waits for `stream`, then returns the mean loss; throws DataError naming the first example
// whose label (or target) was out of range, as the CPU kernels do.
double read_loss(const LossOnDevice& loss, cudaStream_t stream);

}  // namespace aiacc::cuda
