// PTX wrappers for the Hopper bulk-copy engine without tensor maps: 1-D `cp.async.bulk` global -> shared copies
// that signal an mbarrier with their byte count, the mbarrier operations around them, and an L2 eviction policy.
// Compiled for sm_90+ only; on older targets every wrapper traps (kernels using them must refuse those devices
// in can_implement, and the registry's sm_min does).
#ifndef CUDAL2_BULK_COPY_CUH_
#define CUDAL2_BULK_COPY_CUH_

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define CUDAL2_BULK_UNAVAILABLE() __trap()
#else
#define CUDAL2_BULK_UNAVAILABLE()
#endif

namespace cudal2 {

// Initializes the mbarrier at shared address `bar` for `arrivals` arrivals per phase, and makes the
// initialization visible to the async proxy (the bulk-copy engine). Call from one thread, then __syncthreads().
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
}

// Arrives on `bar` (release) and adds `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
}

// Blocks until the phase of `bar` with parity `parity` has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
}

// An L2 policy that evicts the lines it fetches first (data read once, e.g. a weight streamed by a GEMV).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
  return policy;
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared address `dst`
// on the bulk-copy engine; completion is counted as `bytes` transactions on the mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                              uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(l2_policy)
      : "memory");
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
}

// bulk_copy_g2s with the default L2 policy.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  CUDAL2_BULK_UNAVAILABLE();
#endif
}

}  // namespace cudal2

#undef CUDAL2_BULK_UNAVAILABLE

#endif  // CUDAL2_BULK_COPY_CUH_
