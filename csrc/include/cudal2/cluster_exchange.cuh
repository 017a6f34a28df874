// Push-style exchange of fp32 partial sums between the CTAs of a thread-block cluster (sm_90+; the functions trap
// before): a split cluster barrier whose arrive can be issued at kernel start (so that waiting on it later proves every
// CTA of the cluster has started and its shared memory exists), and 8-byte stores into the shared memory of another
// CTA of the cluster. Stores are fire-and-forget; a cluster_sync() (release/acquire) makes them visible to the
// receiving CTA, which then reads its own shared memory: one barrier and no remote load on the critical path.
// Torch-free.
#ifndef CUDAL2_CLUSTER_EXCHANGE_CUH_
#define CUDAL2_CLUSTER_EXCHANGE_CUH_

#include <stdint.h>

namespace cudal2 {

// Largest cluster size of the non-portable (sm_90) cluster attribute; portable clusters stop at 8.
constexpr int kMaxNonPortableClusterSize = 16;

// Arrives on the cluster barrier without ordering memory (pair it with a cluster_wait()). Every thread of every CTA
// of the cluster must call it.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits for the current phase of the cluster barrier (every thread of the cluster arrived), with acquire semantics.
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Full cluster barrier: writes (local or remote shared memory) before it are visible to every CTA after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Stores (v0, v1) at `local` (an 8-byte aligned pointer into this CTA's shared memory) in the shared memory of the
// cluster's CTA `rank` (which may be this CTA).
__device__ __forceinline__ void store_cluster_f2(float* local, uint32_t rank, float v0, float v1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(remote), "f"(v0), "f"(v1) : "memory");
#else
  __trap();
#endif
}

}  // namespace cudal2

#endif  // CUDAL2_CLUSTER_EXCHANGE_CUH_
