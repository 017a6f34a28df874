// Split-K reduction inside a thread-block cluster (sm_90+), shared by the GEMM families: the `splits` CTAs that
// computed the K parts of one output tile are launched as one cluster; each writes its fp32 partial tile to its own
// shared memory, and after a cluster barrier every CTA sums a share of the tile over distributed shared memory, in
// rank order (the same order, starting from 0, as the workspace reduction kernels: results are bitwise equal), and
// stores it. No workspace, no second kernel. A second cluster barrier keeps each CTA's shared memory alive until
// the other CTAs have read it. Torch-free.
#ifndef CUDAL2_CLUSTER_SPLITK_CUH_
#define CUDAL2_CLUSTER_SPLITK_CUH_

#include <cuda_runtime.h>
#include <stdint.h>

#include "cudal2/device_caps.h"

namespace cudal2 {

// Largest split count reduced in a cluster: the portable cluster size.
constexpr int kMaxClusterSplits = 8;

// This CTA's rank in its cluster (0 outside clusters and before sm_90).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return rank;
}

// Barrier over every non-exited thread of the cluster; shared-memory writes before it are visible after it.
__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();  // launchers only pick the cluster reduction on sm_90+
#endif
}

// Four floats at `local` (a shared-memory pointer of this CTA, 16-byte aligned) in the shared memory of CTA `rank`.
__device__ __forceinline__ float4 load_cluster_f4(const float* local, uint32_t rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
#endif
  return v;
}

// Sums the partial tiles [rows][kCols] (fp32, row pitch kCols, at the same shared-memory offset `tile` in every CTA
// of the cluster) over the `splits` ranks in rank order and calls store(row, col, float4 sum of cols col..col+3)
// once per 4-column chunk, the chunks spread over the cluster's threads. Every thread of every CTA must call it after
// writing its part of `tile` (it holds the two cluster barriers).
template <int kCols, class Store>
__device__ __forceinline__ void cluster_reduce_tile(const float* tile, int rows, int splits, Store&& store) {
  static_assert(kCols % 4 == 0, "tile columns must be a multiple of 4");
  constexpr int kChunks = kCols / 4;
  cluster_barrier();
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int first = static_cast<int>(cluster_rank()) * threads + threadIdx.x;
  for (int c = first; c < rows * kChunks; c += splits * threads) {
    const int row = c / kChunks, col = (c % kChunks) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < splits; ++r) {
      const float4 v = load_cluster_f4(tile + row * kCols + col, static_cast<uint32_t>(r));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    store(row, col, sum);
  }
  cluster_barrier();
}

// Whether `splits` K parts can be reduced in a cluster on the current device (sm_90+, 2..kMaxClusterSplits).
inline bool cluster_splitk_available(int splits) {
  return splits >= 2 && splits <= kMaxClusterSplits && current_device_major() >= 9;
}

}  // namespace cudal2

#endif  // CUDAL2_CLUSTER_SPLITK_CUH_
