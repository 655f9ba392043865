// Concatenation of 2-D tensors along the feature axis and its backward split, as raw kernels
// and as Tensor helpers (how Wide&Deep joins pooled embeddings with dense features).
// Legend: N = batch, K = number of inputs, F_k = features of input k, F = sum of F_k.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace aiacc::kernels {

// out[N, F] = [in_0 | in_1 | ... | in_{K-1}], in_k: [N, F_k] row-major, widths: [K] = F_k.
// out is overwritten and must not alias an input. Multi-threaded over rows when large.
template <class T>
void concat_columns(std::int64_t batch, std::span<const T* const> inputs,
                    std::span<const std::int64_t> widths, T* out);

// The backward of concat_columns: grads[k][N, F_k] = grad_out[:, o_k : o_k + F_k] with
// o_k = F_0 + ... + F_{k-1}. A null grads[k] is skipped (that input needs no gradient).
template <class T>
void split_columns(std::int64_t batch, const T* grad_out, std::span<const std::int64_t> widths,
                   std::span<T* const> grads);

// Tensor helper: inputs are K >= 1 CPU tensors [N, F_k] of one dtype (f32 or f64) and one N;
// returns a new [N, F]. Throws InternalError naming the offending input's shape otherwise.
Tensor concat_features(std::span<const Tensor> inputs);

// Tensor helper, the backward of concat_features: splits grad_out [N, F] into new tensors
// [N, F_k]; the widths must sum to F.
std::vector<Tensor> split_features(const Tensor& grad_out, std::span<const std::int64_t> widths);

}  // namespace aiacc::kernels
