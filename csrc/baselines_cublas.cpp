// cuBLAS (classic API) baseline for the benchmarks: the paper's cuBLAS-NN / cuBLAS-TN.
//
// Tensors are row-major; cuBLAS is column-major. A row-major X[r, c] with leading dimension ld is the column-major
// X^T[c, r] with the same ld, so D = A @ B is computed as D^T = B^T A^T in column-major terms:
//   "nn": b is [K, N] row-major = column-major B^T [N, K] (ld = b.stride(0)) -> op N
//   "nt": b is [N, K] row-major = column-major B [K, N]   (ld = b.stride(0)) -> op T gives B^T
// and a [M, K] row-major is column-major A^T [K, M] (op N); out [M, N] row-major is column-major D^T [N, M].
#include "baselines_cublas.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace {

void check_matrix(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "cublas_gemm: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.dim() == 2, "cublas_gemm: ", name, " must be 2-D, got ", t.dim(), "-D");
  TORCH_CHECK(t.stride(1) == 1, "cublas_gemm: ", name, " must have unit inner stride (row-major), got strides ",
              t.strides());
  TORCH_CHECK(t.stride(0) >= std::max<int64_t>(1, t.size(1)), "cublas_gemm: ", name,
              " leading dimension (stride(0)=", t.stride(0), ") must be >= its column count ", t.size(1));
}

int to_int(int64_t v, const char* what) {
  TORCH_CHECK(v <= INT32_MAX, "cublas_gemm: ", what, " = ", v, " exceeds the 32-bit range of cublasGemmEx");
  return static_cast<int>(v);
}

void cublas_gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& layout) {
  TORCH_CHECK(layout == "nn" || layout == "nt", "cublas_gemm: layout must be \"nn\" or \"nt\", got \"", layout, "\"");
  check_matrix(a, "a");
  check_matrix(b, "b");
  check_matrix(out, "out");
  TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16,
              "cublas_gemm: dtype must be float16 or bfloat16, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type() && out.scalar_type() == a.scalar_type(),
              "cublas_gemm: a, b and out must share one dtype, got ", a.scalar_type(), ", ", b.scalar_type(), ", ",
              out.scalar_type());
  TORCH_CHECK(b.device() == a.device() && out.device() == a.device(),
              "cublas_gemm: a, b and out must be on one device");

  const bool nt = layout == "nt";
  const int64_t M = a.size(0), K = a.size(1);
  const int64_t N = nt ? b.size(0) : b.size(1);
  const int64_t Kb = nt ? b.size(1) : b.size(0);
  TORCH_CHECK(Kb == K, "cublas_gemm: inner dimensions differ: a is ", a.sizes(), ", b is ", b.sizes(), " (layout ",
              layout, ")");
  TORCH_CHECK(out.size(0) == M && out.size(1) == N, "cublas_gemm: out must be [", M, ", ", N, "], got ",
              out.sizes());
  if (M == 0 || N == 0) return;

  const c10::cuda::CUDAGuard guard(a.device());
  if (K == 0) {
    out.zero_();
    return;
  }
  const cudaDataType_t type = a.scalar_type() == at::kHalf ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = 0.0f;
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // bound to the current stream by torch
  const cublasStatus_t status = cublasGemmEx(
      handle, nt ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha,
      b.data_ptr(), type, to_int(b.stride(0), "ldb"), a.data_ptr(), type, to_int(a.stride(0), "lda"), &beta,
      out.data_ptr(), type, to_int(out.stride(0), "ldd"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublas_gemm: cublasGemmEx failed with ",
              cublasGetStatusString(status), " (M=", M, ", N=", N, ", K=", K, ", layout ", layout, ")");
}

}  // namespace

void register_cublas_baseline(pybind11::module_& m) {
  m.def("cublas_gemm", &cublas_gemm, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("out"),
        pybind11::arg("layout"),
        "Baseline: out[M,N] = a[M,K] @ B via cublasGemmEx (fp32 compute, default tensor-op algo) on torch's current "
        "handle and stream; B is b[K,N] for layout \"nn\" or b[N,K] for \"nt\"; fp16/bf16, row-major, unit inner "
        "stride.");
}
