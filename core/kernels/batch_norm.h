// Batch normalisation on raw NCHW pointers: statistics per channel, forward in training mode
// (batch statistics, running-statistic update as in PyTorch) and eval mode, and backward.
// Legend: N = batch, C = channels, S = spatial size H*W (1 for [N, C] inputs), M = N*S.
#pragma once

#include <cstdint>

namespace aiacc::kernels {

struct BatchNormGeometry {
  std::int64_t batch = 0;     // N
  std::int64_t channels = 0;  // C
  std::int64_t spatial = 1;   // S = H*W; 1 for [N, C]

  std::int64_t values_per_channel() const { return batch * spatial; }  // M
  void validate() const;  // throws InternalError on a negative or zero C
};

struct BatchNormOptions {
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  double eps = 1e-5;      // added to the variance before the square root
};

// Training-mode forward. x, y: [N, C, S]; gamma, beta: [C].
//   mean[c] = mean of x over (N, S);  var[c] = biased variance (divides by M)
//   y = gamma * (x - mean) / sqrt(var + eps) + beta
// Writes save_mean[C] and save_inv_std[C] = 1/sqrt(var + eps) for backward. When running_mean
// and running_var [C] are non-null they are updated in place with the UNBIASED variance
// (divides by M - 1), exactly like torch.nn.BatchNorm*d. Requires M > 1 (as PyTorch does).
// Statistics are accumulated in double. y must not alias x. Multi-threaded over channels.
template <class T>
void batch_norm_forward_train(const BatchNormGeometry& g, const BatchNormOptions& options,
                              const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                              T* save_inv_std, T* running_mean, T* running_var);

// Eval-mode forward: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta.
// May run in place (y == x). Multi-threaded over channels.
template <class T>
void batch_norm_forward_eval(const BatchNormGeometry& g, const BatchNormOptions& options,
                             const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, T* y);

// Which statistics the forward normalised with, and so what backward differentiates through.
enum class BatchNormStats {
  batch,    // training mode: mean and inv_std depend on x (full backward)
  running,  // eval mode: mean and inv_std are constants (dx = dy * gamma * inv_std)
};

// Backward. x, dy, dx: [N, C, S]; gamma, mean, inv_std, dgamma, dbeta: [C]. `mean` and
// `inv_std` are what the forward normalised with (save_mean/save_inv_std of the training
// forward, or running_mean and 1/sqrt(running_var + eps) in eval mode).
//   dbeta[c]  = sum dy                 dgamma[c] = sum dy * xhat,  xhat = (x - mean) * inv_std
//   batch:    dx = gamma * inv_std / M * (M * dy - dbeta - xhat * dgamma)
//   running:  dx = gamma * inv_std * dy
// Any of dx, dgamma, dbeta may be null (not wanted); the others are OVERWRITTEN. Sums are
// accumulated in double. Multi-threaded over channels.
template <class T>
void batch_norm_backward(const BatchNormGeometry& g, BatchNormStats stats, const T* x, const T* dy,
                         const T* gamma, const T* mean, const T* inv_std, T* dx, T* dgamma,
                         T* dbeta);

// The same computations in pieces, for batch norm synchronised over data-parallel replicas
// (statistics over every replica's batch): each replica computes its moments, the caller merges
// them across replicas (counts, means and M2 by Chan's rule), and the forward and backward
// continue from the merged values. With one replica the pieces give bit-identical results to
// the functions above, which are built from them.
//
// Per-channel mean and M2 (sum of squared deviations from the mean) of x, in double.
template <class T>
void batch_norm_moments(const BatchNormGeometry& g, const T* x, double* mean, double* m2);

// Training forward from statistics over `count` values per channel (all replicas): as
// batch_norm_forward_train, with the moments given.
template <class T>
void batch_norm_forward_from_moments(const BatchNormGeometry& g, const BatchNormOptions& options,
                                     double count, const double* mean, const double* m2, const T* x,
                                     const T* gamma, const T* beta, T* y, T* save_mean,
                                     T* save_inv_std, T* running_mean, T* running_var);

// This replica's backward sums: sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * xhat (double).
template <class T>
void batch_norm_backward_sums(const BatchNormGeometry& g, const T* x, const T* dy, const T* mean,
                              const T* inv_std, double* sum_dy, double* sum_dy_xhat);

// dx from the sums over all replicas (`count` values per channel in all).
template <class T>
void batch_norm_backward_input(const BatchNormGeometry& g, BatchNormStats stats, double count,
                               const T* x, const T* dy, const T* gamma, const T* mean,
                               const T* inv_std, const double* sum_dy, const double* sum_dy_xhat,
                               T* dx);

}  // namespace aiacc::kernels
