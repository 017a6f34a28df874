// Sum of per-thread fp32 accumulators across groups of warps that split K inside one CTA, through shared memory,
// shared by the mma.sync GEMM families. Torch-free.
#ifndef CUDAL2_WARP_GROUP_REDUCE_CUH_
#define CUDAL2_WARP_GROUP_REDUCE_CUH_

namespace cudal2 {

// Shared-memory bytes reduce_warp_groups needs for kGroups groups of kMembers warps with kPerThread floats each.
template <int kPerThread, int kGroups, int kMembers>
constexpr int warp_group_scratch_bytes() {
  return (kGroups - 1) * kMembers * kPerThread * 32 * 4;
}

// The warps of a CTA form kGroups groups of kMembers warps; the warp `member` of every group holds a partial sum of
// the same kPerThread accumulators per thread (`acc`). Adds the partials of groups 1, 2, ... into those of group 0, in
// increasing group order (deterministic), through `scratch` (warp_group_scratch_bytes of shared memory). Every thread
// of the CTA must call it (it holds a __syncthreads); afterwards only group 0's accumulators hold the sums.
template <int kPerThread, int kGroups, int kMembers>
__device__ __forceinline__ void reduce_warp_groups(float* acc, float* scratch, int member, int group) {
  if (kGroups == 1) return;
  const int lane = threadIdx.x & 31;
  auto slot = [&](int g, int i) { return ((g * kMembers + member) * kPerThread + i) * 32 + lane; };
  if (group > 0) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) scratch[slot(group - 1, i)] = acc[i];
  }
  __syncthreads();
  if (group == 0) {
    for (int g = 0; g < kGroups - 1; ++g) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) acc[i] += scratch[slot(g, i)];
    }
  }
}

}  // namespace cudal2

#endif  // CUDAL2_WARP_GROUP_REDUCE_CUH_
