// Concat and split along the feature axis (see concat.h): each output row is a sequence of
// row-segment copies, so rows are independent and split across threads when large.
#include "core/kernels/concat.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {

// Below this many elements the OpenMP fork/join costs more than the copies.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 16;

std::int64_t total_width(std::span<const std::int64_t> widths) {
  std::int64_t total = 0;
  for (std::int64_t w : widths) {
    AIACC_CHECK_GE(w, 0, "concat: negative feature width");
    total += w;
  }
  return total;
}

template <class T>
Tensor concat_typed(std::span<const Tensor> inputs, std::int64_t batch) {
  std::vector<const T*> pointers;
  std::vector<std::int64_t> widths;
  for (const Tensor& t : inputs) {
    pointers.push_back(t.data<T>());
    widths.push_back(t.dim(1));
  }
  Tensor out = Tensor::empty({batch, total_width(widths)}, dtype_of<T>());
  concat_columns<T>(batch, pointers, widths, out.data<T>());
  return out;
}

template <class T>
std::vector<Tensor> split_typed(const Tensor& grad_out, std::span<const std::int64_t> widths) {
  const std::int64_t batch = grad_out.dim(0);
  std::vector<Tensor> grads;
  std::vector<T*> pointers;
  for (std::int64_t w : widths) {
    grads.push_back(Tensor::empty({batch, w}, dtype_of<T>()));
    pointers.push_back(grads.back().data<T>());
  }
  split_columns<T>(batch, grad_out.data<T>(), widths, pointers);
  return grads;
}

}  // namespace

template <class T>
void concat_columns(std::int64_t batch, std::span<const T* const> inputs,
                    std::span<const std::int64_t> widths, T* out) {
  AIACC_CHECK_EQ(inputs.size(), widths.size(), "concat: inputs vs widths");
  const std::int64_t total = total_width(widths);
  util::parallel_for(std::int64_t{0}, batch, batch * total >= kMinParallelElements, [&](std::int64_t i) {
    T* o = out + i * total;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const T* in = inputs[k] + i * widths[k];
      o = std::copy(in, in + widths[k], o);
    }
  });
}

template <class T>
void split_columns(std::int64_t batch, const T* grad_out, std::span<const std::int64_t> widths,
                   std::span<T* const> grads) {
  AIACC_CHECK_EQ(grads.size(), widths.size(), "split: gradients vs widths");
  const std::int64_t total = total_width(widths);
  util::parallel_for(std::int64_t{0}, batch, batch * total >= kMinParallelElements, [&](std::int64_t i) {
    const T* g = grad_out + i * total;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (grads[k] != nullptr) std::copy(g, g + widths[k], grads[k] + i * widths[k]);
      g += widths[k];
    }
  });
}

Tensor concat_features(std::span<const Tensor> inputs) {
  AIACC_CHECK(!inputs.empty(), "concat_features needs at least one input");
  const Tensor& first = inputs[0];
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    AIACC_CHECK(t.rank() == 2 && t.dim(0) == first.dim(0) && t.dtype() == first.dtype(),
                "concat_features: input {} is {} {}, expected [{}, F] {}", k, dtype_name(t.dtype()),
                t.shape().str(), first.rank() == 2 ? first.dim(0) : -1, dtype_name(first.dtype()));
  }
  if (first.dtype() == DType::f64) return concat_typed<double>(inputs, first.dim(0));
  AIACC_CHECK(first.dtype() == DType::f32, "concat_features: unsupported dtype {}",
              dtype_name(first.dtype()));
  return concat_typed<float>(inputs, first.dim(0));
}

std::vector<Tensor> split_features(const Tensor& grad_out, std::span<const std::int64_t> widths) {
  AIACC_CHECK(grad_out.rank() == 2, "split_features: gradient {} is not [N, F]",
              grad_out.shape().str());
  AIACC_CHECK_EQ(total_width(widths), grad_out.dim(1), "split_features: widths vs gradient {}",
                 grad_out.shape().str());
  if (grad_out.dtype() == DType::f64) return split_typed<double>(grad_out, widths);
  AIACC_CHECK(grad_out.dtype() == DType::f32, "split_features: unsupported dtype {}",
              dtype_name(grad_out.dtype()));
  return split_typed<float>(grad_out, widths);
}

#define AIACC_INSTANTIATE_CONCAT(T)                                                     \
  template void concat_columns<T>(std::int64_t, std::span<const T* const>,              \
                                  std::span<const std::int64_t>, T*);                   \
  template void split_columns<T>(std::int64_t, const T*, std::span<const std::int64_t>, \
                                 std::span<T* const>);
AIACC_INSTANTIATE_CONCAT(float)
AIACC_INSTANTIATE_CONCAT(double)
#undef AIACC_INSTANTIATE_CONCAT

}  // namespace aiacc::kernels
