// cuBLAS (classic API) baseline for the benchmarks: cublasGemmEx with fp32 compute and the default tensor-op algo.
#pragma once

#include <torch/extension.h>

// Adds `cublas_gemm(a, b, out, layout)` to the extension module `m`:
// out[M, N] = a[M, K] @ B, with B given as b[K, N] (layout "nn") or b[N, K] (layout "nt"),
// fp16 or bf16, fp32 accumulation, on torch's current cuBLAS handle and stream.
void register_cublas_baseline(pybind11::module_& m);
