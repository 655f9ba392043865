// The loss launchers: argument checks, result buffers from the caching allocator, the kernels
// (loss_kernels.h), and the read-back that names a bad example.
#include "core/cuda/kernels/losses.h"

#include <fmt/format.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/kernels/loss_kernels.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace aiacc::cuda {
namespace {

// The result buffers and the per-example scratch; the first-bad index preset to all ones
// ("none": atomicMin only ever lowers it).
struct LossLaunch {
  LossOnDevice out;
  memory::PooledBuffer per_example;
  LossLaunch(std::int64_t batch, const char* what, int device, cudaStream_t stream) {
    auto& gpu = device_allocator(device);
    const memory::StreamId s = stream_id(stream);
    out.mean = memory::PooledBuffer(gpu, sizeof(double), s);
    out.first_bad = memory::PooledBuffer(gpu, sizeof(std::uint64_t), s);
    out.batch = batch;
    out.what = what;
    per_example = memory::PooledBuffer(gpu, static_cast<std::size_t>(batch) * sizeof(double), s);
    AIACC_CUDA_CHECK(cudaMemsetAsync(out.first_bad.get(), 0xff, sizeof(std::uint64_t), stream));
  }
};

}  // namespace

LossOnDevice launch_softmax_cross_entropy(std::int64_t batch, std::int64_t classes, const float* logits,
                                          const std::int64_t* labels, double label_smoothing,
                                          float* dlogits, int device, cudaStream_t stream) {
  if (batch < 1 || classes < 1 || !(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw InternalError(fmt::format("softmax cross-entropy on [{}, {}] logits with smoothing {}", batch,
                                    classes, label_smoothing));
  }
  DeviceGuard guard(device);
  LossLaunch launch(batch, "softmax cross-entropy", device, stream);
  detail::launch_softmax_ce_per_example(batch, classes, logits, labels,
                                        label_smoothing / static_cast<double>(classes), 1.0 - label_smoothing,
                                        1.0 / static_cast<double>(batch), dlogits,
                                        launch.per_example.data<double>(),
                                        launch.out.first_bad.data<std::uint64_t>(), stream);
  detail::launch_mean(launch.per_example.data<double>(), batch, launch.out.mean.data<double>(), stream);
  return std::move(launch.out);
}

LossOnDevice launch_binary_cross_entropy_with_logits(std::int64_t batch, const float* logits,
                                                     const float* targets, float* dlogits, int device,
                                                     cudaStream_t stream) {
  if (batch < 1) throw InternalError(fmt::format("binary cross-entropy on {} logits", batch));
  DeviceGuard guard(device);
  LossLaunch launch(batch, "binary cross-entropy", device, stream);
  detail::launch_bce_per_example(batch, logits, targets, 1.0 / static_cast<double>(batch), dlogits,
                                 launch.per_example.data<double>(), launch.out.first_bad.data<std::uint64_t>(),
                                 stream);
  detail::launch_mean(launch.per_example.data<double>(), batch, launch.out.mean.data<double>(), stream);
  return std::move(launch.out);
}

double read_loss(const LossOnDevice& loss, cudaStream_t stream) {
  double mean = 0.0;
  std::uint64_t first_bad = 0;
  AIACC_CUDA_CHECK(cudaMemcpyAsync(&mean, loss.mean.get(), sizeof mean, cudaMemcpyDeviceToHost, stream));
  AIACC_CUDA_CHECK(cudaMemcpyAsync(&first_bad, loss.first_bad.get(), sizeof first_bad, cudaMemcpyDeviceToHost, stream));
  AIACC_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first_bad != ~std::uint64_t{0}) {
    throw DataError(fmt::format("{}: example {} has a label or target out of range", loss.what, first_bad));
  }
  return mean;
}

}  // namespace aiacc::cuda
