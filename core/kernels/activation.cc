// ReLU kernels: branch-free element-wise loops, split across OpenMP threads for large tensors.
#include "core/kernels/activation.h"

#include "core/util/parallel_for.h"

namespace aiacc::kernels {
namespace {
// Below this many elements thread start-up costs more than the loop itself.
constexpr std::int64_t kParallelMinElements = 1 << 15;
}  // namespace

template <class T>
void relu_forward(std::int64_t count, const T* x, T* y) {
  // `x < 0 ? 0 : x` rather than max(x, 0) so a NaN input stays NaN.
  util::parallel_for_simd(std::int64_t{0}, count, count >= kParallelMinElements,
                          [=](std::int64_t i) { y[i] = x[i] < T(0) ? T(0) : x[i]; });
}

template <class T>
void relu_backward(std::int64_t count, const T* y, const T* dy, T* dx) {
  util::parallel_for_simd(std::int64_t{0}, count, count >= kParallelMinElements,
                          [=](std::int64_t i) { dx[i] = y[i] > T(0) ? dy[i] : T(0); });
}

template void relu_forward<float>(std::int64_t, const float*, float*);
template void relu_forward<double>(std::int64_t, const double*, double*);
template void relu_backward<float>(std::int64_t, const float*, const float*, float*);
template void relu_backward<double>(std::int64_t, const double*, const double*, double*);

}  // namespace aiacc::kernels
