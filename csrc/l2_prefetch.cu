// L2 prefetch kernel (see l2_prefetch.h).
#include "l2_prefetch.h"

namespace cudal2 {
namespace {

constexpr int kThreads = 128;

// Prefetches [p, p + bytes) into L2 (bytes > 0). Prefetches are hints: they never fault, read or write.
__device__ __forceinline__ void prefetch_l2(const char* p, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // One bulk prefetch of the 16-byte-aligned part (the copy engine fetches it); stray ends use line prefetches.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  const uintptr_t a = (begin + 15) & ~uintptr_t{15}, b = end & ~uintptr_t{15};
  if (b > a) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(static_cast<uint32_t>(b - a)) : "memory");
    if (a != begin) asm volatile("prefetch.global.L2 [%0];" ::"l"(begin));
    if (b != end) asm volatile("prefetch.global.L2 [%0];" ::"l"(end - 1));
    return;
  }
#endif
  for (int off = 0; off < bytes; off += kL2PrefetchLineBytes) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p + bytes - 1));
}

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const L2PrefetchBatch batch) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t want = static_cast<int64_t>(batch.lines_per_chunk) * kL2PrefetchLineBytes;
  for (int r = 0; r < batch.count; ++r) {
    const L2PrefetchRegion g = batch.regions[r];
    const int64_t chunks = (g.row_bytes + kL2PrefetchChunkBytes - 1) / kL2PrefetchChunkBytes;
    for (int64_t i = first; i < g.rows * chunks; i += stride) {
      const int64_t row = i / chunks, offset = (i % chunks) * kL2PrefetchChunkBytes;
      const int64_t bytes = min(want, g.row_bytes - offset);
      prefetch_l2(static_cast<const char*>(g.base) + row * g.pitch_bytes + offset, static_cast<int>(bytes));
    }
  }
}

}  // namespace

cudaError_t add_l2_prefetch_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                 size_t num_deps, const L2PrefetchBatch& batch, int sm_count) {
  *node = nullptr;
  int64_t chunks = 0;
  for (int r = 0; r < batch.count; ++r) {
    const L2PrefetchRegion& g = batch.regions[r];
    chunks += g.rows * ((g.row_bytes + kL2PrefetchChunkBytes - 1) / kL2PrefetchChunkBytes);
  }
  if (chunks == 0) return cudaSuccess;
  // At most one CTA of 128 threads per SM: every SM's copy engine takes a share, and each CTA is light beside the
  // kernels it runs with.
  const int64_t ctas = (chunks + kThreads - 1) / kThreads;
  L2PrefetchBatch arg = batch;
  void* args[] = {&arg};
  cudaKernelNodeParams params{};
  params.func = reinterpret_cast<void*>(&l2_prefetch_kernel);
  params.gridDim = dim3(static_cast<unsigned>(ctas < sm_count ? ctas : sm_count));
  params.blockDim = dim3(kThreads);
  params.kernelParams = args;
  return cudaGraphAddKernelNode(node, graph, deps, num_deps, &params);
}

}  // namespace cudal2
