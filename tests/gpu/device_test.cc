// The GPU stack answers: a device is visible, memory round-trips, and cuBLAS SGEMM agrees with
// a naive CPU GEMM. Skipped (exit 77) where no GPU is present.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "tests/testing/gradient_check.h"

namespace {

TEST(GpuDevice, SgemmMatchesCpuReference) {
  const int m = 37, n = 29, k = 53;  // odd sizes on purpose
  auto a = aiacc::testing::random_floats(m * k, 1);
  auto b = aiacc::testing::random_floats(k * n, 2);
  std::vector<float> c(m * n, 0.0f), reference(m * n, 0.0f);
  // Column-major, as cuBLAS expects: C[m,n] = A[m,k] B[k,n].
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += double(a[i + p * m]) * b[p + j * k];
      reference[i + j * m] = static_cast<float>(sum);
    }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  AIACC_CUDA_CHECK(cudaMalloc(&da, a.size() * 4));
  AIACC_CUDA_CHECK(cudaMalloc(&db, b.size() * 4));
  AIACC_CUDA_CHECK(cudaMalloc(&dc, c.size() * 4));
  AIACC_CUDA_CHECK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  AIACC_CUDA_CHECK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  AIACC_CUBLAS_CHECK(cublasCreate(&handle));
  AIACC_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));  // no TF32 here
  const float alpha = 1.0f, beta = 0.0f;
  AIACC_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, db, k,
                                 &beta, dc, m));
  AIACC_CUDA_CHECK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
  AIACC_CUBLAS_CHECK(cublasDestroy(handle));
  AIACC_CUDA_CHECK(cudaFree(da));
  AIACC_CUDA_CHECK(cudaFree(db));
  AIACC_CUDA_CHECK(cudaFree(dc));
  for (int i = 0; i < m * n; ++i) EXPECT_NEAR(c[i], reference[i], 1e-4f) << "element " << i;
}

TEST(GpuDevice, BadCallBecomesCudaError) {
  EXPECT_THROW(AIACC_CUDA_CHECK(cudaSetDevice(1 << 20)), aiacc::CudaError);
}

}  // namespace
