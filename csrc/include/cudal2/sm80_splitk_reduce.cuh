// Deterministic split-K reduction: D = T(sum over splits, in split order, of fp32 partials + bias). Torch-free.
#ifndef CUDAL2_SM80_SPLITK_REDUCE_CUH_
#define CUDAL2_SM80_SPLITK_REDUCE_CUH_

#include <cstdint>

#include <cutlass/numeric_types.h>

#include "cudal2/pdl.cuh"

namespace cudal2::sm80 {

constexpr int kReduceThreads = 256;

// One thread per 8 consecutive outputs of a row. `partials` is [splits][rows_padded][ld] fp32 with ld % 8 == 0 and
// ld >= round_up(n, 8), 16-byte aligned; every split is summed in the same order on every run. Launched as a
// programmatic dependent of the GEMM on sm_90 (it waits for the GEMM's completion before reading the partials).
template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    splitk_reduce_kernel(const float* __restrict__ partials, int splits, int64_t split_stride, int ld,
                         const T* __restrict__ bias, T* __restrict__ d, int64_t ldd, int m, int n) {
  pdl_wait_prerequisites();
  const int chunks = (n + 7) / 8;
  const int64_t idx = int64_t(blockIdx.x) * kReduceThreads + threadIdx.x;
  if (idx >= int64_t(m) * chunks) return;
  const int row = int(idx / chunks), col = int(idx % chunks) * 8;
  const float* src = partials + int64_t(row) * ld + col;
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < splits; ++s, src += split_stride) {
    const float4 lo = *reinterpret_cast<const float4*>(src);
    const float4 hi = *reinterpret_cast<const float4*>(src + 4);
    sum[0] += lo.x; sum[1] += lo.y; sum[2] += lo.z; sum[3] += lo.w;
    sum[4] += hi.x; sum[5] += hi.y; sum[6] += hi.z; sum[7] += hi.w;
  }
  const int valid = n - col < 8 ? n - col : 8;
  alignas(16) T out[8];
  for (int j = 0; j < 8; ++j) {
    const float b = (bias != nullptr && j < valid) ? static_cast<float>(bias[col + j]) : 0.f;
    out[j] = static_cast<T>(sum[j] + b);
  }
  T* dst = d + int64_t(row) * ldd + col;
  if (valid == 8) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
  } else {
    for (int j = 0; j < valid; ++j) dst[j] = out[j];
  }
}

}  // namespace cudal2::sm80

#endif  // CUDAL2_SM80_SPLITK_REDUCE_CUH_
