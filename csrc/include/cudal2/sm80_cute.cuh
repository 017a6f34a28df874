// Host side of the sm80_cute GEMM family (A100-class multistage CuTe kernels, also used for small problems on
// H100): problem checks, workspace sizing and the launcher behind the kernel C ABI. Generated kernel files include
// this header and instantiate one configuration with CUDAL2_SM80_CUTE_KERNEL.
//
// Runtime knobs of cudal2_problem:
//   splits  : split-K parts (1 = none; 0 = automatic: when the output tiles leave SMs idle, enough parts to give
//             every SM one CTA, each with at least kMinKTilesPerSplit BK tiles). Clamped to the number of BK tiles.
//             With 2..kMaxClusterSplits parts on sm_90+, the parts of a tile form a thread-block cluster and reduce
//             their fp32 partials in distributed shared memory (no workspace, one kernel); otherwise partials go to
//             the workspace in fp32 and a second kernel on the same stream (launched early with programmatic
//             dependent launch on sm_90) reduces them. Both sum in split order (bitwise deterministic and equal).
//             Kernels built with SplitKPolicy::kWorkspace always take the workspace path (no cluster launch).
//   swizzle : threadblock swizzle group: consecutive CTAs walk `swizzle` tiles along the raster dimension before
//             stepping along the other (0 = the whole dimension).
//   raster  : 0/1 = consecutive CTAs walk along M (share B tiles), 2 = along N (share A tiles).
// Requirements (else CUDAL2_UNSUPPORTED, and the dispatcher falls back): A, B, D 16-byte aligned and lda, ldb, ldd
// multiples of 8 elements. Any M, N, K >= 1 is handled (residues are predicated).
#ifndef CUDAL2_SM80_CUTE_CUH_
#define CUDAL2_SM80_CUTE_CUH_

#include <algorithm>
#include <climits>
#include <type_traits>

#include "cudal2/kernel_export.h"
#include "cudal2/launch.cuh"
#include "cudal2/sm80_cute_kernel.cuh"
#include "cudal2/sm80_splitk_reduce.cuh"

namespace cudal2::sm80 {

// How split-K partials are reduced: in a thread-block cluster where available (else the workspace), or always
// through the workspace and a reduction kernel (no cluster launch).
enum class SplitKPolicy { kAuto, kWorkspace };

// The ABI entry points of one configuration `Tr` (a GemmTraits) with split-K reduction policy `kPolicy`.
template <class Tr, SplitKPolicy kPolicy = SplitKPolicy::kAuto>
struct Launcher {
  using T = typename Tr::Element;
  static constexpr int kDtype = std::is_same_v<T, cutlass::half_t> ? CUDAL2_FP16 : CUDAL2_BF16;
  static constexpr int kLayout = Tr::kNN ? CUDAL2_NN : CUDAL2_NT;
  static constexpr int kMinKTilesPerSplit = 4;  // automatic split-K keeps at least this many BK tiles per part

  // Whether the `splits` parts of a tile reduce in a cluster (the policy allows it and the device has clusters).
  static bool cluster_reduce(int splits) {
    return kPolicy == SplitKPolicy::kAuto && cluster_splitk_available(splits);
  }

  // Tiles of the output grid and the K split actually used for `p`.
  struct Plan {
    int tiles_m, tiles_n, k_tiles_per_split, splits;
  };

  static Plan plan(const cudal2_problem* p) {
    Plan pl;
    pl.tiles_m = int((p->m + Tr::BM - 1) / Tr::BM);
    pl.tiles_n = int((p->n + Tr::BN - 1) / Tr::BN);
    const int k_tiles = int((p->k + Tr::BK - 1) / Tr::BK);
    int wanted = p->splits;
    if (wanted <= 0) {  // automatic: fill the SMs the output tiles leave idle
      const int64_t tiles = int64_t(pl.tiles_m) * pl.tiles_n, sms = p->sm_count > 0 ? p->sm_count : 1;
      wanted = tiles >= sms ? 1 : int(std::min<int64_t>(sms / tiles, k_tiles / kMinKTilesPerSplit));
    }
    wanted = std::max(1, std::min(wanted, k_tiles));
    pl.k_tiles_per_split = (k_tiles + wanted - 1) / wanted;
    pl.splits = (k_tiles + pl.k_tiles_per_split - 1) / pl.k_tiles_per_split;  // no empty split
    return pl;
  }

  // Accepts every shape whose pointers are 16-byte aligned and whose leading dimensions are multiples of 8.
  static cudal2_status can_implement(const cudal2_problem* p) {
    const cudal2_status common = check_common(p, kDtype, kLayout);
    if (common != CUDAL2_OK) return common;
    if (!is_aligned(p->a, 16) || !is_aligned(p->b, 16) || !is_aligned(p->d, 16)) return CUDAL2_UNSUPPORTED;
    if (p->lda % 8 != 0 || p->ldb % 8 != 0 || p->ldd % 8 != 0) return CUDAL2_UNSUPPORTED;
    // 32-bit tile coordinates and CTA indices.
    const int64_t limit = INT_MAX / 2;
    if (p->m > limit || p->n > limit || p->k > limit) return CUDAL2_UNSUPPORTED;
    if (((p->m + Tr::BM - 1) / Tr::BM) * ((p->n + Tr::BN - 1) / Tr::BN) > limit) return CUDAL2_UNSUPPORTED;
    if (p->splits > 65535) return CUDAL2_UNSUPPORTED;
    return CUDAL2_OK;
  }

  // fp32 partial tiles [splits][tiles_m*BM][tiles_n*BN] when splitting K through the workspace, else nothing.
  static size_t workspace_size(const cudal2_problem* p) {
    if (can_implement(p) != CUDAL2_OK) return 0;
    const Plan pl = plan(p);
    if (pl.splits <= 1 || cluster_reduce(pl.splits)) return 0;
    return size_t(pl.splits) * size_t(pl.tiles_m) * Tr::BM * size_t(pl.tiles_n) * Tr::BN * sizeof(float);
  }

  // Enqueues the GEMM (and, with split-K outside a cluster, the reduction of its partials) on p->stream.
  static cudal2_status launch(const cudal2_problem* p) {
    const cudal2_status ok = can_implement(p);
    if (ok != CUDAL2_OK) return ok;
    const Plan pl = plan(p);
    const size_t ws_bytes = workspace_size(p);
    if (ws_bytes > 0 && (p->workspace == nullptr || p->workspace_bytes < ws_bytes)) return CUDAL2_WORKSPACE_TOO_SMALL;
    if (ws_bytes > 0 && !is_aligned(p->workspace, 16)) return CUDAL2_BAD_ARGUMENT;

    GemmParams<T> args;
    args.a = static_cast<const T*>(p->a);
    args.b = static_cast<const T*>(p->b);
    args.d = static_cast<T*>(p->d);
    args.bias = static_cast<const T*>(p->bias);
    args.cluster_reduce = cluster_reduce(pl.splits);
    args.partials = pl.splits > 1 && !args.cluster_reduce ? static_cast<float*>(p->workspace) : nullptr;
    args.lda = p->lda;
    args.ldb = p->ldb;
    args.ldd = p->ldd;
    args.m = int(p->m);
    args.n = int(p->n);
    args.k = int(p->k);
    args.tiles_m = pl.tiles_m;
    args.tiles_n = pl.tiles_n;
    args.k_tiles_per_split = pl.k_tiles_per_split;
    args.splits = pl.splits;
    args.partials_ld = pl.tiles_n * Tr::BN;
    args.group = p->swizzle;
    args.raster_n = p->raster == 2;

    cudaError_t err = allow_dynamic_smem<gemm_kernel<Tr>>(Tr::kSmemBytes);
    if (err != cudaSuccess) return CUDAL2_LAUNCH_FAILED;
    const cudaStream_t stream = static_cast<cudaStream_t>(p->stream);
    const dim3 grid(unsigned(pl.tiles_m) * unsigned(pl.tiles_n), 1, unsigned(pl.splits));
    if (args.cluster_reduce) {
      LaunchSpec spec{grid, dim3(Tr::kThreads), Tr::kSmemBytes};
      spec.cluster = dim3(1, 1, unsigned(pl.splits));
      return launch_status(launch_kernel(gemm_kernel<Tr>, spec, stream, args));
    }
    gemm_kernel<Tr><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(args);
    err = cudaGetLastError();
    if (err != cudaSuccess || pl.splits <= 1) return launch_status(err);

    const int64_t chunks = p->m * ((p->n + 7) / 8);
    const unsigned blocks = unsigned((chunks + kReduceThreads - 1) / kReduceThreads);
    const int64_t split_stride = int64_t(pl.tiles_m) * Tr::BM * args.partials_ld;
    LaunchSpec reduce{dim3(blocks), dim3(kReduceThreads)};
    reduce.programmatic = true;  // overlaps the GEMM's tail; waits for it (always on: see launch.cuh)
    return launch_status(launch_kernel(splitk_reduce_kernel<T>, reduce, stream,
                                       static_cast<const float*>(args.partials), pl.splits, split_stride,
                                       args.partials_ld, args.bias, args.d, int64_t(p->ldd), args.m, args.n));
  }
};

}  // namespace cudal2::sm80

// Exports the sm80_cute configuration GemmTraits<...> (the arguments after POLICY) under the kernel C ABI with split-K
// policy POLICY (a SplitKPolicy enumerator). NAME equals the generated file's stem.
#define CUDAL2_SM80_CUTE_EXPORT(NAME, POLICY, ...)                                                                 \
  using NAME##_launcher = ::cudal2::sm80::Launcher<::cudal2::sm80::GemmTraits<__VA_ARGS__>,                        \
                                                   ::cudal2::sm80::SplitKPolicy::POLICY>;                          \
  CUDAL2_EXPORT_KERNEL(NAME, "sm80_cute", 80, 90, NAME##_launcher::kDtype, NAME##_launcher::kLayout, 1,             \
                       &NAME##_launcher::can_implement, &NAME##_launcher::workspace_size, &NAME##_launcher::launch)

// One configuration with split-K policy POLICY (kAuto or kWorkspace) and the family's original code.
#define CUDAL2_SM80_CUTE_KERNEL_SPLITK(NAME, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES, POLICY) \
  CUDAL2_SM80_CUTE_EXPORT(NAME, POLICY, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES)

// The same with the default split-K policy (cluster reduction where available).
#define CUDAL2_SM80_CUTE_KERNEL(NAME, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES) \
  CUDAL2_SM80_CUTE_KERNEL_SPLITK(NAME, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES, kAuto)

// One configuration with code-level choices (GemmTraits: register pipeline 1..3, cp.async prefetch depth in tiles,
// staggered A/B copies, EPILOGUE an Epilogue enumerator: kSmem or kDirect).
#define CUDAL2_SM80_CUTE_KERNEL_CODE(NAME, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES, POLICY, REG_PIPELINE,     \
                                     SMEM_PREFETCH, STAGGER_AB, EPILOGUE)                                          \
  CUDAL2_SM80_CUTE_EXPORT(NAME, POLICY, ELEMENT, B_N_MAJOR, BM, BN, BK, WARPS, STAGES, REG_PIPELINE, SMEM_PREFETCH, \
                          STAGGER_AB, ::cudal2::sm80::Epilogue::EPILOGUE)

#endif  // CUDAL2_SM80_CUTE_CUH_
