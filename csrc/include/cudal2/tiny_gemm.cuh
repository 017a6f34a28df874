// Host side of the tiny GEMM family: the kernel C ABI (can_implement, workspace_size, launch) of one instantiation of
// tiny_gemm_kernel, and the export macro used by generated `kernels/sm80/tiny_*.cu` files.
//
// Runtime knobs: `splits` = CTAs splitting K per output tile, reduced inside a thread-block cluster (sm_90+: 1..16,
// above 8 with the non-portable cluster attribute where the device co-schedules such a cluster of this kernel, else
// at most 8), or, for more than a cluster holds (up to kMaxGridSplits), across the grid: a cooperative launch whose
// CTAs meet at one grid barrier and exchange partials through the workspace (workspace_size() says how much), where
// the device supports cooperative launches and every CTA of the grid fits on it at once (else the request is clamped
// to what a cluster holds). Requests are also clamped to the number of K tiles, then rebalanced so that no part is
// empty; 0 = automatic: enough parts to fill the SMs within one cluster while every part keeps at least kMinSplitK of
// K. Before sm_90 there is no cluster (nor a grid-wide split). `swizzle` and `raster` are ignored. The launcher's rule
// (plan()) then fixes what the problem needs and no more: the covering warps alone unless a CTA's K range exceeds
// kMaxWarpChainK (then Traits::kWarpsK groups of them), and dynamic shared memory for min(stages, the CTA's K tiles)
// stage buffers plus a receive buffer only when partial sums meet in a CTA or a cluster. Never a second kernel. On
// sm_90 the GEMM launches with programmatic dependent launch (unless CUDAL2_DISABLE_PDL=1), the grid-wide split
// without it. Function attributes, the cluster capacity and the co-resident CTAs are set and queried once per device.
// Requirements (else CUDAL2_UNSUPPORTED, and the dispatcher falls back): K % 8 == 0; A and B 16-byte aligned with
// lda, ldb multiples of 8 elements; M below 65536 tiles; the device grants the CTA's largest shared memory. Any M and
// N; D and bias have no alignment requirement (16-byte stores only where D allows them).
#ifndef CUDAL2_TINY_GEMM_CUH_
#define CUDAL2_TINY_GEMM_CUH_

#include <atomic>
#include <climits>
#include <type_traits>

#include "cudal2/device_caps.h"
#include "cudal2/kernel_export.h"
#include "cudal2/launch.cuh"
#include "cudal2/tiny_kernel.cuh"

namespace cudal2 {
namespace tiny {

// Least K per split part of the automatic choice: shorter parts save less math than the cluster exchange costs.
constexpr int kMinSplitK = 128;
// Most split CTAs per output tile of the grid-wide split (explicit requests only).
constexpr int kMaxGridSplits = 64;
// Longest K range a CTA's covering warps take alone: a warp's chain of dependent mma per accumulator (K / 16 steps)
// up to this costs less than the receive-buffer round (shared-memory write, barrier, read) that K groups need.
constexpr int kMaxWarpChainK = 256;

// What one launch uses (TinyGemm::plan): split CTAs per tile and their K tiles, K groups of covering warps, stage
// buffers, threads and dynamic shared memory per CTA.
struct LaunchPlan {
  int splits, tiles_per_split, warp_groups, stages, threads, smem_bytes;
  bool grid_wide;              // the splits meet at a grid barrier (cooperative launch), not in a cluster
  long long workspace_floats;  // the grid-wide split's partial slots, every tile (0 otherwise)
};

// How many clusters of `size` CTAs of `kernel` (`threads` threads and `smem` bytes of dynamic shared memory per CTA)
// the current device runs at once; 0 when none fits or the query is refused.
template <class Kernel>
int active_clusters(Kernel* kernel, int size, int threads, int smem) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = static_cast<unsigned>(size);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1, 1, size);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &config) != cudaSuccess) {
    cudaGetLastError();  // a refused query is not the caller's error
    return 0;
  }
  return clusters;
}

// What a kernel may launch on one device: the largest split count one cluster of it may have (16 where such a
// cluster fits, else 8, else 1; 1 before sm_90), how many clusters of 16 run at once (0 when none), and how many of
// its largest CTAs (every stage, every K group) the device holds at once for a cooperative launch (0 where
// cooperative launches are unsupported, and before sm_90).
struct ClusterLimits {
  int max_splits, concurrent_16, coresident;
};

template <class T, class Tr>
struct TinyGemm {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value, "fp16 or bf16 only");
  static constexpr int kDtype = std::is_same<T, __half>::value ? CUDAL2_FP16 : CUDAL2_BF16;
  static constexpr int kLayout = Tr::kNT ? CUDAL2_NT : CUDAL2_NN;

  // CUDAL2_OK when launch() runs `p` correctly.
  static cudal2_status can_implement(const cudal2_problem* p) {
    const cudal2_status common = check_common(p, kDtype, kLayout);
    if (common != CUDAL2_OK) return common;
    if (p->k % 8 != 0) return CUDAL2_UNSUPPORTED;
    if (p->lda % 8 != 0 || p->ldb % 8 != 0 || !is_aligned(p->a, 16) || !is_aligned(p->b, 16)) return CUDAL2_UNSUPPORTED;
    // 32-bit sizes and tile indices; M tiles fit the grid's y dimension.
    if (p->m > INT_MAX || p->n > INT_MAX - Tr::kTileN || p->k > INT_MAX - Tr::kTileK) return CUDAL2_UNSUPPORTED;
    if (ceil_div(static_cast<int>(p->m), Tr::kTileM) > 65535) return CUDAL2_UNSUPPORTED;
    return Tr::kSmemBytes <= current_device_smem_optin() ? CUDAL2_OK : CUDAL2_UNSUPPORTED;
  }

  // Prepares the kernel on the current device once (opt-in shared memory; on sm_90 the non-portable cluster
  // attribute) and returns its ClusterLimits there; max_splits is 0 when the shared-memory attribute cannot be set.
  static ClusterLimits prepare_device() {
    // 1 + max_splits + 64 * concurrent_16 + 64 * 64 * coresident; 0 = not yet
    static std::atomic<long long> prepared[kMaxCachedDevices];
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return {0, 0, 0};
    const bool cacheable = device >= 0 && device < kMaxCachedDevices;
    if (cacheable) {
      const long long known = prepared[device].load(std::memory_order_acquire);
      if (known != 0) {
        return {static_cast<int>((known - 1) % 64), static_cast<int>((known - 1) / 64 % 64),
                static_cast<int>((known - 1) / 4096)};
      }
    }
    auto* kernel = tiny_gemm_kernel<T, Tr>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes) != cudaSuccess) {
      cudaGetLastError();  // the launch reports the failure; leave no error behind for the caller's next check
      return {0, 0, 0};
    }
    ClusterLimits limits{1, 0, 0};
    if (current_device_major() >= 9) {
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
        limits.concurrent_16 = active_clusters(kernel, kMaxSplits, Tr::kThreads, Tr::kSmemBytes);
      } else {
        cudaGetLastError();  // a refused attribute is not the caller's error
      }
      if (limits.concurrent_16 > 0) {
        limits.max_splits = kMaxSplits;
      } else if (active_clusters(kernel, kMaxClusterSplits, Tr::kThreads, Tr::kSmemBytes) > 0) {
        limits.max_splits = kMaxClusterSplits;
      }
      limits.coresident = coresident_ctas(kernel);
    }
    if (cacheable) {
      prepared[device].store(1 + limits.max_splits + 64LL * limits.concurrent_16 + 4096LL * limits.coresident,
                             std::memory_order_release);
    }
    return limits;
  }

  // CTAs of `kernel` at their largest (kThreads, kSmemBytes) that the current device runs at once, 0 where it
  // refuses cooperative launches or the query fails: a cooperative grid of at most this many CTAs is co-resident.
  template <class Kernel>
  static int coresident_ctas(Kernel* kernel) {
    if (current_device_attribute<cudaDevAttrCooperativeLaunch>() == 0) return 0;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, Tr::kSmemBytes) != cudaSuccess) {
      cudaGetLastError();  // a refused query is not the caller's error
      return 0;
    }
    return per_sm * current_device_sm_count();
  }

  // Output tiles of `p`.
  static long long output_tiles(const cudal2_problem* p) {
    return static_cast<long long>(ceil_div(static_cast<int>(p->n), Tr::kTileN)) *
           ceil_div(static_cast<int>(p->m), Tr::kTileM);
  }

  // Split parts for `p` (see the header comment) within `limits` (prepare_device()): the automatic choice takes
  // clusters of more than 8 only when all of the problem's tiles' clusters run at once; an explicit request beyond
  // a cluster runs grid-wide (at most kMaxGridSplits, and only as many as keep every CTA of the grid resident).
  static int splits(const cudal2_problem* p, const ClusterLimits& limits) {
    const int k_tiles = ceil_div(static_cast<int>(p->k), Tr::kTileK);
    const long long tiles = output_tiles(p);
    long long s = p->splits;
    int cap = limits.max_splits;
    if (s <= 0) {
      const int sms = p->sm_count > 0 ? p->sm_count : current_device_sm_count();
      s = max_int(1, sms) / tiles;
      if (s > p->k / kMinSplitK) s = p->k / kMinSplitK;
      if (tiles > limits.concurrent_16) cap = min_int(cap, kMaxClusterSplits);
    } else if (s > cap && limits.coresident / tiles > cap) {
      cap = static_cast<int>(min_int(kMaxGridSplits, static_cast<int>(limits.coresident / tiles)));
    }
    const int clamped = max_int(1, min_int(min_int(static_cast<int>(s < INT_MAX ? s : INT_MAX), cap), k_tiles));
    return ceil_div(k_tiles, ceil_div(k_tiles, clamped));
  }

  // The launch of `p` within `limits` (prepare_device()): splits() parts of ceil(K tiles / parts) tiles each; K
  // groups only when that K range exceeds kMaxWarpChainK; stage buffers for the K range when it fits kStages (all
  // requested at once), else kStages (streamed); the receive buffer only with several sources.
  static LaunchPlan plan(const cudal2_problem* p, const ClusterLimits& limits) {
    LaunchPlan plan{};
    plan.splits = splits(p, limits);
    plan.tiles_per_split = ceil_div(ceil_div(static_cast<int>(p->k), Tr::kTileK), plan.splits);
    plan.warp_groups = plan.tiles_per_split * Tr::kTileK > kMaxWarpChainK ? Tr::kWarpsK : 1;
    plan.stages = min_int(Tr::kStages, plan.tiles_per_split);
    plan.threads = Tr::kWarpsMN * plan.warp_groups * 32;
    plan.grid_wide = plan.splits > limits.max_splits;
    // Grid-wide, every warp group's partials meet in the workspace: no receive buffer.
    plan.smem_bytes = plan.grid_wide ? Tr::smem_bytes(plan.stages, 1, 1)
                                     : Tr::smem_bytes(plan.stages, plan.warp_groups, plan.splits);
    plan.workspace_floats =
        plan.grid_wide ? output_tiles(p) * grid_tile_floats<Tr>(plan.splits, plan.warp_groups) : 0;
    return plan;
  }

  // Bytes of workspace launch() needs: the grid-wide split's partial slots, else none.
  static size_t workspace_size(const cudal2_problem* p) {
    if (can_implement(p) != CUDAL2_OK) return 0;
    const ClusterLimits limits = prepare_device();
    if (limits.max_splits == 0) return 0;
    return static_cast<size_t>(plan(p, limits).workspace_floats) * sizeof(float);
  }

  // Enqueues the GEMM on p->stream.
  static cudal2_status launch(const cudal2_problem* p) {
    const cudal2_status ok = can_implement(p);
    if (ok != CUDAL2_OK) return ok;
    const ClusterLimits limits = prepare_device();
    if (limits.max_splits == 0) return CUDAL2_LAUNCH_FAILED;
    const LaunchPlan plan = TinyGemm::plan(p, limits);
    Params<T> args;
    args.a = static_cast<const T*>(p->a);
    args.b = static_cast<const T*>(p->b);
    args.d = static_cast<T*>(p->d);
    args.bias = static_cast<const T*>(p->bias);
    args.m = static_cast<int>(p->m);
    args.n = static_cast<int>(p->n);
    args.k = static_cast<int>(p->k);
    args.lda = p->lda;
    args.ldb = p->ldb;
    args.ldd = p->ldd;
    args.splits = plan.splits;
    args.partials = nullptr;
    if (plan.grid_wide) {
      const size_t need = static_cast<size_t>(plan.workspace_floats) * sizeof(float);
      if (p->workspace == nullptr || p->workspace_bytes < need) return CUDAL2_WORKSPACE_TOO_SMALL;
      if (!is_aligned(p->workspace, 16)) return CUDAL2_BAD_ARGUMENT;
      args.partials = static_cast<float*>(p->workspace);
    }
    args.tiles_per_split = plan.tiles_per_split;
    args.warp_groups = plan.warp_groups;
    args.vector_store = is_aligned(p->d, 16) && p->ldd % 8 == 0;

    const dim3 grid(ceil_div(args.n, Tr::kTileN), ceil_div(args.m, Tr::kTileM), plan.splits);
    if (plan.grid_wide) return launch_status(launch_cooperative(grid, plan, static_cast<cudaStream_t>(p->stream), args));
    LaunchSpec spec{grid, dim3(plan.threads), static_cast<size_t>(plan.smem_bytes)};
    if (plan.splits > 1) spec.cluster = dim3(1, 1, plan.splits);
    spec.programmatic = pdl_allowed();
    return launch_status(launch_kernel(tiny_gemm_kernel<T, Tr>, spec, static_cast<cudaStream_t>(p->stream), args));
  }

  // The grid-wide split's launch: cooperative (every CTA resident at once, so the grid barrier cannot deadlock; the
  // split count was bounded by the co-resident CTAs), no cluster, no programmatic dependent launch.
  static cudaError_t launch_cooperative(dim3 grid, const LaunchPlan& plan, cudaStream_t stream, const Params<T>& args) {
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(plan.threads);
    config.dynamicSmemBytes = static_cast<size_t>(plan.smem_bytes);
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, tiny_gemm_kernel<T, Tr>, args);
  }
};

}  // namespace tiny
}  // namespace cudal2

// Exports kernel NAME as TinyGemm<T, Traits<NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS>> (T: __half or
// __nv_bfloat16; NT: true for B [N, K], false for B [K, N]).
#define CUDAL2_TINY_KERNEL(NAME, T, NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS)                                     \
  using NAME##_impl = cudal2::tiny::TinyGemm<T, cudal2::tiny::Traits<NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS>>; \
  CUDAL2_EXPORT_KERNEL(NAME, "tiny", 80, 90, NAME##_impl::kDtype, NAME##_impl::kLayout, 1,                          \
                       &NAME##_impl::can_implement, &NAME##_impl::workspace_size, &NAME##_impl::launch)

#endif  // CUDAL2_TINY_GEMM_CUH_
