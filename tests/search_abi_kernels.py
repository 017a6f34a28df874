"""Small C ABI kernel sources for the search's tests: a naive fp16 NT SIMT GEMM and variants that are wrong,
accumulate in fp16, fault, hang or cheat (what a proposer may write). Each `.cu` text exports
`cudal2_kernel_<name>`; the compile farm builds it like any search-written source."""
from __future__ import annotations

TEMPLATE = r"""#include <cuda_fp16.h>
#include "cudal2/kernel_export.h"
{includes}
namespace {{
__global__ void gemm_kernel(const __half* a, const __half* b, __half* d, int64_t m, int64_t n, int64_t k,
                            int64_t lda, int64_t ldb, int64_t ldd) {{
  const int64_t row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  {body}
}}
cudal2_status can_implement(const cudal2_problem* p) {{ return cudal2::check_common(p, CUDAL2_FP16, CUDAL2_NT); }}
size_t workspace_size(const cudal2_problem*) {{ return 0; }}
cudal2_status launch(const cudal2_problem* p) {{
  const cudal2_status ok = can_implement(p);
  if (ok != CUDAL2_OK) return ok;
  {launch_prefix}
  const dim3 block(16, 16), grid((p->n + 15) / 16, (p->m + 15) / 16);
  gemm_kernel<<<grid, block, 0, {stream}>>>(static_cast<const __half*>(p->a), static_cast<const __half*>(p->b),
      static_cast<__half*>(p->d), p->m, p->n, p->k, p->lda, p->ldb, p->ldd);
  {launch_suffix}
  return cudal2::launch_status(cudaGetLastError());
}}
}}  // namespace
CUDAL2_EXPORT_KERNEL({name}, "test_naive", 80, 90, CUDAL2_FP16, CUDAL2_NT, 0, can_implement, workspace_size, launch)
"""

CORRECT_BODY = """float acc = 0.f;
  for (int64_t i = 0; i < k; ++i) acc += __half2float(a[row * lda + i]) * __half2float(b[col * ldb + i]);
  d[row * ldd + col] = __float2half(acc);"""
BODIES = {
    "correct": CORRECT_BODY,
    # Drops the last K element: plausible output, wrong numbers.
    "wrong": CORRECT_BODY.replace("i < k;", "i < k - 1;"),
    # Accumulates in fp16 (passes loose random checks at small K, fails the exact-integer check).
    "fp16acc": """__half acc = __float2half(0.f);
  for (int64_t i = 0; i < k; ++i) acc = __hfma(a[row * lda + i], b[col * ldb + i], acc);
  d[row * ldd + col] = acc;""",
    # Accumulates in fp16 without an FMA chain (the scan refuses __hadd/__hmul; the exact-integer checks catch it).
    "fp16acc_hidden": """__half acc = __float2half(0.f);
  for (int64_t i = 0; i < k; ++i) acc = __hadd(acc, __hmul(a[row * lda + i], b[col * ldb + i]));
  d[row * ldd + col] = acc;""",
    "trap": "__trap();",
    "hang": "for (;;) { __nanosleep(1000); }  // asm volatile inside: the compiler cannot drop the loop",
}


def naive_source(name: str, variant: str = "correct", *, includes: str = "", launch_prefix: str = "",
                 launch_suffix: str = "", stream: str = "static_cast<cudaStream_t>(p->stream)") -> str:
    """The naive kernel `name` with the body `variant` (see BODIES), optionally with extra host code around the
    launch (cheats: a private stream, a device sync, a cuBLAS call)."""
    return TEMPLATE.format(name=name, body=BODIES[variant], includes=includes, launch_prefix=launch_prefix,
                           launch_suffix=launch_suffix, stream=stream)


# Cheating kernels by label; each exports cudal2_kernel_cheat_<label> and must be refused by the static scan.
CHEATS = {
    "private_stream": naive_source("cheat_private_stream", launch_prefix="static cudaStream_t s; cudaStreamCreate(&s);",
                                   stream="s"),
    "device_sync": naive_source("cheat_device_sync", launch_suffix="cudaDeviceSynchronize();"),
    "cublas": naive_source("cheat_cublas", includes='#include <cublas_v2.h>',
                           launch_prefix="cublasHandle_t h; cublasCreate(&h);"),
    "pointer_cache": naive_source(
        "cheat_pointer_cache", includes="#include <unordered_map>",
        launch_prefix="static std::unordered_map<const void*, void*> cache; "
                      "if (cache.count(p->a)) return CUDAL2_OK; cache[p->a] = p->d;"),
    "fp16_accumulate": naive_source("cheat_fp16_accumulate", "fp16acc"),
}
