// How the decode family streams its weight into shared memory, and the device PTX of the non-default streams.
//
// WeightStream::kCpAsync (the default): 16-byte cp.async copies, one per thread and chunk, into padded rows.
// WeightStream::kCpAsyncEvictFirst: the same copies with an L2 evict-first cache policy on the weight (read once per
// call; the activations, read by every CTA, keep the normal policy).
// WeightStream::kTma: one thread issues 2-D tensor-map copies (cp.async.bulk.tensor, sm_90) of 64-element wide boxes
// (128-byte rows, 128-byte swizzle) with the L2 evict-first policy; completion is tracked by one mbarrier per
// pipeline stage. Out-of-bounds box elements (N and K residues) arrive as zeros. Torch-free.
#ifndef CUDAL2_DECODE_WEIGHT_STREAM_CUH_
#define CUDAL2_DECODE_WEIGHT_STREAM_CUH_

#include <cuda.h>
#include <stdint.h>

namespace cudal2 {
namespace decode {

enum class WeightStream : int { kCpAsync = 0, kCpAsyncEvictFirst = 1, kTma = 2 };

// Elements per row of one TMA box: 128 bytes, the widest row the 128-byte swizzle allows.
constexpr int kTmaBoxCols = 64;

// Element offset of (row, col) in a [rows][cols] tile stored as cols / 64 boxes of [rows][64] elements written by
// TMA with the 128-byte swizzle: within each 1024-byte group of 8 rows, 16-byte chunk c of row r sits at chunk
// c ^ (r % 8). The 8 row addresses of an ldmatrix (8 consecutive rows, one chunk) hit 8 distinct bank groups.
// Boxes must start at 1024-byte aligned shared-memory addresses.
__host__ __device__ constexpr int swizzled_box_offset(int rows, int row, int col) {
  return (col / kTmaBoxCols) * (rows * kTmaBoxCols) + row * kTmaBoxCols + ((((col >> 3) & 7) ^ (row & 7)) << 3) +
         (col & 7);
}

// A 64-bit L2 cache policy that marks the lines a load brings in as first to evict.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// cp_async_16 (mma_sync_ptx.cuh) with L2 cache policy `policy`: 16 bytes when `valid`, else zero-fill.
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void* src, bool valid, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0), "l"(policy)
               : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// Initializes the mbarrier at shared address `bar` for `count` arriving threads.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialized mbarriers visible to the async proxy (TMA) before any copy signals them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives on `bar` and tells it to also wait for `bytes` of asynchronous copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase with parity `parity` of `bar` has completed (its copies' data is then visible).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Copies the box at coordinates (c0 = innermost, c1) of the 2-D tensor `map` (a __grid_constant__ parameter) to
// shared address `dst`, completing `bytes` of `bar`'s transaction count, with L2 cache policy `policy`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace decode
}  // namespace cudal2

#endif  // CUDAL2_DECODE_WEIGHT_STREAM_CUH_
