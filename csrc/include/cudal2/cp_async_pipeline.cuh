// The multi-stage cp.async main loop shared by the mma.sync GEMM families (decode, tiny). Torch-free.
#ifndef CUDAL2_CP_ASYNC_PIPELINE_CUH_
#define CUDAL2_CP_ASYNC_PIPELINE_CUH_

#include "cudal2/mma_sync_ptx.cuh"
#include "cudal2/pdl.cuh"

namespace cudal2 {

// Streams `num_tiles` K tiles through kStages shared-memory stage buffers: issues the copies of the first
// kStages - 1 tiles at once, lets the next kernel on the stream get scheduled (PDL; it waits for this grid before
// touching memory), then for each tile t waits until it landed, issues the copies of tile t + kStages - 1 into the
// buffer tile t - 1 used, and calls compute(t % kStages). load(stage, t) issues the cp.async copies of tile t
// (counted from the CTA's first) into stage buffer `stage`. Every thread of the CTA must call it; on return only
// empty cp.async groups may be pending, but other warps may still read the last stage.
template <int kStages, class Load, class Compute>
__device__ __forceinline__ void run_cp_async_pipeline(int num_tiles, Load&& load, Compute&& compute) {
  static_assert(kStages >= 2, "the pipeline needs at least 2 stages");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load(s, s);
    cp_async_commit();
  }
  pdl_launch_dependents();
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t landed for every thread; stage (t - 1) % kStages is free again
    const int next = t + kStages - 1;
    if (next < num_tiles) load(next % kStages, next);
    cp_async_commit();
    compute(t % kStages);
  }
}

}  // namespace cudal2

#endif  // CUDAL2_CP_ASYNC_PIPELINE_CUH_
