// Element-wise addition kernels: branch-free loops, split across OpenMP threads for large
// tensors.
#include "core/kernels/elementwise.h"

#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {
// Below this many elements thread start-up costs more than the loop itself.
constexpr std::int64_t kParallelMinElements = 1 << 15;
}  // namespace

template <class T>
void add(std::int64_t count, const T* a, const T* b, T* y) {
  util::parallel_for_simd(std::int64_t{0}, count, count >= kParallelMinElements,
                          [=](std::int64_t i) { y[i] = a[i] + b[i]; });
}

template <class T>
void add_relu_forward(std::int64_t count, const T* a, const T* b, T* y) {
  util::parallel_for_simd(std::int64_t{0}, count, count >= kParallelMinElements, [=](std::int64_t i) {
    const T sum = a[i] + b[i];
    // `sum < 0 ? 0 : sum` rather than max(sum, 0) so a NaN stays NaN.
    y[i] = sum < T(0) ? T(0) : sum;
  });
}

template void add<float>(std::int64_t, const float*, const float*, float*);
template void add<double>(std::int64_t, const double*, const double*, double*);
template void add_relu_forward<float>(std::int64_t, const float*, const float*, float*);
template void add_relu_forward<double>(std::int64_t, const double*, const double*, double*);

}  // namespace aiacc::kernels
