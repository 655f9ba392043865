// cuBLAS is column-major; a row-major [R, C] matrix is its column-major transpose [C, R] with
// leading dimension C. So each row-major product is computed as the transposed product:
//   y^T[O, N]  = (w^T)^T x^T        -> gemm(T, N, m=O, n=N, k=I, A=w lda=I, B=x ldb=I, C=y ldc=O)
//   dx^T[I, N] = w^T dy^T           -> gemm(N, N, m=I, n=N, k=O, A=w lda=I, B=dy ldb=O, C=dx ldc=I)
//   dw^T[I, O] = x^T dy             -> gemm(N, T, m=I, n=O, k=N, A=x lda=I, B=dy ldb=O, C=dw ldc=I)
#include "core/cuda/linear.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels/bias.h"
#include "core/log.h"

namespace aiacc::cuda {
namespace {

template <class T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<BFloat16>() { return CUDA_R_16BF; }

// C[m, n] = op(A) op(B) in column-major terms, inputs of type T, fp32 output and accumulation.
template <class T>
void gemm(cublasHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m,
          std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b,
          std::int64_t ldb, float* c, std::int64_t ldc) {
  const float alpha = 1.0f, beta = 0.0f;
  AIACC_CUBLAS_CHECK(cublasGemmEx(h, op_a, op_b, static_cast<int>(m), static_cast<int>(n),
                                  static_cast<int>(k), &alpha, a, cuda_type<T>(), static_cast<int>(lda),
                                  b, cuda_type<T>(), static_cast<int>(ldb), &beta, c, CUDA_R_32F,
                                  static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

cublasHandle_t CublasTraits::create() {
  cublasHandle_t h = nullptr;
  AIACC_CUBLAS_CHECK(cublasCreate(&h));
  return h;
}

void CublasTraits::destroy(cublasHandle_t h) noexcept {
  const cublasStatus_t status = cublasDestroy(h);
  if (status == CUBLAS_STATUS_SUCCESS) return;
  try {
    log::get("cuda")->warn("cublasDestroy failed: {}", cublasGetStatusString(status));
  } catch (...) {
    // Nothing more to do in a noexcept path.
  }
}

void CublasTraits::set_stream(cublasHandle_t h, cudaStream_t stream) {
  AIACC_CUBLAS_CHECK(cublasSetStream(h, stream));
}

template <class T>
void linear_forward(const CublasHandle& cublas, const kernels::LinearGeometry& g, const T* x,
                    const T* w, const float* b, float* y, cudaStream_t stream) {
  g.validate();
  if (g.batch == 0 || g.out_features == 0) return;
  if (g.in_features == 0) {
    // An empty sum; cuBLAS refuses the leading dimension 0 such a product would pass.
    AIACC_CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<std::size_t>(g.batch * g.out_features) * sizeof(float), stream));
  } else {
    gemm<T>(cublas.on(stream), CUBLAS_OP_T, CUBLAS_OP_N, g.out_features, g.batch, g.in_features, w,
            g.in_features, x, g.in_features, y, g.out_features);
  }
  if (b != nullptr) launch_add_bias_rows(y, b, g.batch, g.out_features, stream);
}

template <class T>
void linear_backward(const CublasHandle& cublas, const kernels::LinearGeometry& g, const T* x,
                     const T* w, const T* dy, float* dx, float* dw, float* db, cudaStream_t stream) {
  g.validate();
  const cublasHandle_t h = cublas.on(stream);
  // Products over an empty dimension are zeros: cuBLAS refuses the leading dimension 0 or the
  // k = 0 they would pass.
  const auto zero = [&](float* out, std::int64_t count) {
    AIACC_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(count) * sizeof(float), stream));
  };
  if (dx != nullptr && g.batch > 0 && g.in_features > 0) {
    if (g.out_features == 0) {
      zero(dx, g.batch * g.in_features);
    } else {
      gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, g.in_features, g.batch, g.out_features, w, g.in_features,
              dy, g.out_features, dx, g.in_features);
    }
  }
  if (dw != nullptr && g.out_features > 0 && g.in_features > 0) {
    if (g.batch == 0) {
      zero(dw, g.out_features * g.in_features);
    } else {
      gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, g.in_features, g.out_features, g.batch, x, g.in_features,
              dy, g.out_features, dw, g.in_features);
    }
  }
  if (db != nullptr) launch_bias_grad_rows(dy, db, g.batch, g.out_features, stream);
}

template void linear_forward<float>(const CublasHandle&, const kernels::LinearGeometry&, const float*,
                                    const float*, const float*, float*, cudaStream_t);
template void linear_forward<BFloat16>(const CublasHandle&, const kernels::LinearGeometry&,
                                       const BFloat16*, const BFloat16*, const float*, float*, cudaStream_t);
template void linear_backward<float>(const CublasHandle&, const kernels::LinearGeometry&, const float*,
                                     const float*, const float*, float*, float*, float*, cudaStream_t);
template void linear_backward<BFloat16>(const CublasHandle&, const kernels::LinearGeometry&,
                                        const BFloat16*, const BFloat16*, const BFloat16*, float*,
                                        float*, float*, cudaStream_t);

}  // namespace aiacc::cuda
