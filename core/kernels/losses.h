// Loss kernels on raw pointers: softmax cross-entropy with integer labels (optionally label
// smoothed) and binary cross-entropy with logits. Both return the mean loss over the batch and,
// in the same pass, its gradient with respect to the logits.
// Legend: N = batch, C = classes.
#pragma once

#include <cstdint>

namespace aiacc::kernels {

// Softmax cross-entropy, mean over the batch, numerically stable (log-sum-exp):
//   q_i = (1 - s) * onehot(labels[i]) + s / C          s = label_smoothing in [0, 1]
//   loss = 1/N * sum_i sum_c -q_ic * log softmax(logits_i)_c
//   dlogits[i, c] = (softmax(logits_i)_c - q_ic) / N
// logits [N, C], labels [N] (int64), dlogits [N, C] (overwritten; null: loss only). N, C >= 1.
// Throws DataError naming the example index and value when a label is outside [0, C), before
// any output is written. Sums run in double. Multi-threaded over examples when large.
template <class T>
double softmax_cross_entropy(std::int64_t batch, std::int64_t classes, const T* logits,
                             const std::int64_t* labels, double label_smoothing, T* dlogits);

// Binary cross-entropy with logits, mean over the batch, in the stable form
//   loss_i = max(x, 0) - x * t + log(1 + exp(-|x|))       dlogits_i = (sigmoid(x) - t) / N
// logits, targets, dlogits: [N] (dlogits overwritten; null: loss only). N >= 1. Targets are
// 0/1 labels or soft labels in [0, 1]; anything else (including NaN) throws DataError naming
// the example index and value, before any output is written.
template <class T>
double binary_cross_entropy_with_logits(std::int64_t batch, const T* logits, const T* targets,
                                        T* dlogits);

}  // namespace aiacc::kernels
