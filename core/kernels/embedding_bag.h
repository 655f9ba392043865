// Embedding bag on raw pointers, independent of where the rows are stored: the caller gathers
// the batch's unique rows into one contiguous buffer (from a local table or a parameter
// server) and these kernels pool them per example and scatter gradients back per unique row.
// Legend: N = batch (bags), P = id positions in the batch, U = unique rows, D = row dim.
#pragma once

#include <cstdint>
#include <vector>

namespace aiacc::kernels {

enum class BagMode {
  sum,   // out[i] = sum of the bag's rows
  mean,  // out[i] = sum / bag size; an empty bag gives zeros
};

struct EmbeddingBagGeometry {
  std::int64_t batch = 0;          // N
  std::int64_t num_positions = 0;  // P
  std::int64_t num_unique = 0;     // U
  std::int64_t dim = 0;            // D
  void validate() const;           // throws InternalError on a negative dimension
};

// out[N, D]: example i pools unique_rows[indices[p]] for p in [offsets[i], offsets[i+1]).
//   unique_rows [U, D], indices [P] (each in [0, U)), offsets [N + 1] CSR (offsets[0] = 0,
//   non-decreasing, offsets[N] = P).
// Throws InternalError on a malformed offsets array or an index out of range (checked before
// any work). out is overwritten. Multi-threaded over examples.
template <class T>
void embedding_bag_forward(const EmbeddingBagGeometry& g, BagMode mode, const T* unique_rows,
                           const std::int64_t* indices, const std::int64_t* offsets, T* out);

// grad_unique_rows[U, D] = sum over positions p with indices[p] == u of grad_out[bag of p]
// (divided by that bag's size in mean mode). Rows no position uses become zero. Overwrites
// grad_unique_rows. Race-free and deterministic for any thread count: positions are bucketed
// by unique row first (a counting sort), then threads own disjoint unique rows.
template <class T>
void embedding_bag_backward(const EmbeddingBagGeometry& g, BagMode mode, const T* grad_out,
                            const std::int64_t* indices, const std::int64_t* offsets,
                            T* grad_unique_rows);

// The same with bag i's row at out + i * out_stride (out_stride >= D): one field's columns of
// a wider [N, out_stride] matrix, such as a model's concatenated input.
template <class T>
void embedding_bag_forward(const EmbeddingBagGeometry& g, BagMode mode, const T* unique_rows,
                           const std::int64_t* indices, const std::int64_t* offsets, T* out,
                           std::int64_t out_stride);

// The backward over a plan made beforehand (make_backward_plan below), with bag i's gradient
// row at grad_out + i * grad_stride: what the GPU's kernel computes, in the same order.
template <class T>
void embedding_bag_backward_planned(const EmbeddingBagGeometry& g, BagMode mode, const T* grad_out,
                                    std::int64_t grad_stride, const std::int64_t* row_start,
                                    const std::int64_t* bag_of, const std::int64_t* offsets,
                                    T* grad_unique_rows);

// The transpose backward needs (row -> bags that use it), built by a counting sort: bags
// using unique row u are bag_of[row_start[u] .. row_start[u + 1]), in position order, so
// sums run in an order no thread count changes. Shared by the CPU backward and the GPU one
// (core/cuda/kernels/embedding_bag.h), which gets these two arrays copied to the device.
struct EmbeddingBagBackwardPlan {
  std::vector<std::int64_t> row_start;  // [U + 1]
  std::vector<std::int64_t> bag_of;     // [P]
};
// Validates the bags like the kernels (InternalError) and builds the plan.
EmbeddingBagBackwardPlan make_backward_plan(const EmbeddingBagGeometry& g,
                                            const std::int64_t* indices,
                                            const std::int64_t* offsets);

}  // namespace aiacc::kernels
