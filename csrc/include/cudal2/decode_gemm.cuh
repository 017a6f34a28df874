// Host side of the decode GEMM family: the kernel C ABI (can_implement, workspace_size, launch) of one
// instantiation of decode_gemm_kernel, and the export macro used by generated `kernels/sm80/decode_*.cu` files.
//
// Runtime knobs: `splits` = split-K parts (0 = automatic: enough CTAs for one resident wave on p->sm_count SMs,
// with the fp32 partials no larger than the weight; always clamped to the number of K tiles);
// `swizzle` and `raster` are ignored. With 2..kMaxClusterSplits splits on sm_90+ and a grid that fills at most a
// quarter of the resident CTA slots, the split CTAs of a tile form a cluster and reduce in distributed shared memory
// (no workspace, no second kernel); otherwise the partials go to the workspace and a second small kernel on the same
// stream reduces them in split order. (Measured on an H200: clusters gain ~1.5% on such small grids but cost 10-14%
// on grids near or above one wave, where co-scheduling 8 large-smem CTAs per GPC leaves SMs idle.)
// On sm_90 the GEMM launches with programmatic dependent launch (unless CUDAL2_DISABLE_PDL=1): its CTAs may start
// during the preceding kernel's tail and wait for it before any load.
// Requirements (else CUDAL2_UNSUPPORTED, and the dispatcher falls back): M <= tile_m; K % 8 == 0; NN: N % 8 == 0;
// A and B 16-byte aligned with lda, ldb multiples of 8 elements; the device grants the CTA's shared memory.
// D and bias have no alignment requirement.
// The TMA weight stream (Traits' WeightStream::kTma) also needs an sm_90+ device and a tensor map the driver accepts
// (the same alignment rules); its map is encoded on the host once per weight and cached (decode_weight_map.h).
#ifndef CUDAL2_DECODE_GEMM_CUH_
#define CUDAL2_DECODE_GEMM_CUH_

#include <climits>
#include <type_traits>

#include "cudal2/decode_kernel.cuh"
#include "cudal2/decode_weight_map.h"
#include "cudal2/kernel_export.h"
#include "cudal2/launch.cuh"

namespace cudal2 {
namespace decode {

template <class T, class Tr>
struct DecodeGemm {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value, "fp16 or bf16 only");
  static constexpr int kDtype = std::is_same<T, __half>::value ? CUDAL2_FP16 : CUDAL2_BF16;
  static constexpr int kLayout = Tr::kNT ? CUDAL2_NT : CUDAL2_NN;
  static constexpr int kSmMin = Tr::kTma ? 90 : 80;  // TMA (cp.async.bulk.tensor) needs sm_90

  // CUDAL2_OK when launch() runs `p` correctly.
  static cudal2_status can_implement(const cudal2_problem* p) {
    const cudal2_status common = check_common(p, kDtype, kLayout);
    if (common != CUDAL2_OK) return common;
    if (p->m > Tr::kTileM || p->k % 8 != 0 || (!Tr::kNT && p->n % 8 != 0)) return CUDAL2_UNSUPPORTED;
    if (p->lda % 8 != 0 || p->ldb % 8 != 0 || !is_aligned(p->a, 16) || !is_aligned(p->b, 16)) return CUDAL2_UNSUPPORTED;
    // 32-bit tile indices; M * N partial offsets fit in 32 bits.
    if (p->n > INT_MAX / 64 || p->k > INT_MAX - Tr::kTileK) return CUDAL2_UNSUPPORTED;
    if (kSmMin >= 90 && current_device_major() < 9) return CUDAL2_UNSUPPORTED;
    return fits_shared_memory() ? CUDAL2_OK : CUDAL2_UNSUPPORTED;
  }

  // Whether the current device grants the CTA's shared memory (e.g. 227 KiB on sm_90, 163 KiB on sm_80).
  static bool fits_shared_memory() { return Tr::kSmemBytes <= current_device_smem_optin(); }

  // Split-K parts for `p`: the requested or automatic count, rebalanced so that every part has the same number of
  // K tiles (the last one possibly fewer) and none is empty.
  static int splits(const cudal2_problem* p) {
    const int n_tiles = ceil_div(static_cast<int>(p->n), Tr::kTileN);
    const int k_tiles = ceil_div(static_cast<int>(p->k), Tr::kTileK);
    int s = p->splits;
    if (s <= 0) {
      const int one_wave = max_int(1, p->sm_count) * Tr::kCtasPerSm / n_tiles;
      const int traffic_cap = static_cast<int>(p->k / (2 * p->m));  // fp32 partials <= the weight's bytes
      s = max_int(1, min_int(one_wave, traffic_cap));
    }
    s = max_int(1, min_int(min_int(s, k_tiles), 65535));
    return ceil_div(k_tiles, ceil_div(k_tiles, s));
  }

  // Whether the `s` split-K parts of `p` are reduced in a thread-block cluster (see the header comment).
  static bool cluster_reduce(const cudal2_problem* p, int s) {
    const long long ctas = static_cast<long long>(ceil_div(static_cast<int>(p->n), Tr::kTileN)) * s;
    return 4 * ctas <= static_cast<long long>(max_int(1, p->sm_count)) * Tr::kCtasPerSm && cluster_splitk_available(s);
  }

  // Bytes of the fp32 partials [s][M][N]: none without split-K or with the cluster reduction.
  static size_t partials_bytes(const cudal2_problem* p, int s, bool cluster) {
    return s == 1 || cluster ? 0 : static_cast<size_t>(s) * p->m * p->n * sizeof(float);
  }

  // Workspace bytes (the split-K partials, if any).
  static size_t workspace_size(const cudal2_problem* p) {
    if (can_implement(p) != CUDAL2_OK) return 0;
    const int s = splits(p);
    return partials_bytes(p, s, cluster_reduce(p, s));
  }

  // The kernel arguments of `p` with `s` split-K parts, reduced in a cluster or not.
  static Params<T> make_params(const cudal2_problem* p, int s, bool cluster) {
    Params<T> args;
    args.a = static_cast<const T*>(p->a);
    args.b = static_cast<const T*>(p->b);
    args.d = static_cast<T*>(p->d);
    args.bias = static_cast<const T*>(p->bias);
    args.partials = static_cast<float*>(p->workspace);
    args.m = static_cast<int>(p->m);
    args.n = static_cast<int>(p->n);
    args.k = static_cast<int>(p->k);
    args.lda = p->lda;
    args.ldb = p->ldb;
    args.ldd = p->ldd;
    args.splits = s;
    args.tiles_per_split = ceil_div(ceil_div(static_cast<int>(p->k), Tr::kTileK), s);
    args.cluster_reduce = cluster;
    return args;
  }

  // Enqueues the GEMM (and, with split-K, the reduction of its partials) on p->stream.
  static cudal2_status launch(const cudal2_problem* p) {
    const cudal2_status ok = can_implement(p);
    if (ok != CUDAL2_OK) return ok;
    const int s = splits(p);
    const bool cluster = cluster_reduce(p, s);
    const size_t need = partials_bytes(p, s, cluster);
    if (need > 0 && (p->workspace == nullptr || p->workspace_bytes < need)) return CUDAL2_WORKSPACE_TOO_SMALL;
    const int n_tiles = ceil_div(static_cast<int>(p->n), Tr::kTileN);
    cudaStream_t stream = static_cast<cudaStream_t>(p->stream);

    const Params<T> args = make_params(p, s, cluster);
    LaunchSpec gemm{dim3(n_tiles, s), dim3(Tr::kThreads), Tr::kSmemBytes};
    if (args.cluster_reduce) gemm.cluster = dim3(1, s, 1);
    gemm.programmatic = pdl_allowed();
    cudaError_t err;
    if constexpr (Tr::kTma) {
      const WeightMap& w = weight_map(p, Tr::kWRows);
      if (!w.ok) return CUDAL2_UNSUPPORTED;
      TmaParams<T> tma_args;
      static_cast<Params<T>&>(tma_args) = args;
      tma_args.w_map = w.map;
      if (allow_dynamic_smem<decode_gemm_tma_kernel<T, Tr>>(Tr::kSmemBytes) != cudaSuccess) return CUDAL2_LAUNCH_FAILED;
      err = launch_kernel(decode_gemm_tma_kernel<T, Tr>, gemm, stream, tma_args);
    } else {
      if (allow_dynamic_smem<decode_gemm_kernel<T, Tr>>(Tr::kSmemBytes) != cudaSuccess) return CUDAL2_LAUNCH_FAILED;
      err = launch_kernel(decode_gemm_kernel<T, Tr>, gemm, stream, args);
    }
    if (err != cudaSuccess || s == 1 || args.cluster_reduce) return launch_status(err);
    // The reduction's launch overlaps the GEMM (programmatic dependent launch on sm_90+; it waits for the GEMM).
    LaunchSpec reduce{dim3(static_cast<unsigned>((p->m * p->n + 255) / 256)), dim3(256)};
    reduce.programmatic = true;
    return launch_status(launch_kernel(decode_splitk_reduce_kernel<T>, reduce, stream, args));
  }
};

}  // namespace decode
}  // namespace cudal2

// Exports kernel NAME as DecodeGemm<T, Traits<NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS, STREAM>> (T: __half or
// __nv_bfloat16; NT: true for B [N, K], false for B [K, N]; STREAM: a WeightStream enumerator, e.g. kTma).
#define CUDAL2_DECODE_STREAM_KERNEL(NAME, T, NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS, STREAM)                    \
  using NAME##_impl = cudal2::decode::DecodeGemm<                                                                  \
      T, cudal2::decode::Traits<NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS, cudal2::decode::WeightStream::STREAM>>; \
  CUDAL2_EXPORT_KERNEL(NAME, "decode", NAME##_impl::kSmMin, 90, NAME##_impl::kDtype, NAME##_impl::kLayout, 1,       \
                       &NAME##_impl::can_implement, &NAME##_impl::workspace_size, &NAME##_impl::launch)

// CUDAL2_DECODE_STREAM_KERNEL with the default weight stream (cp.async into padded rows).
#define CUDAL2_DECODE_KERNEL(NAME, T, NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS) \
  CUDAL2_DECODE_STREAM_KERNEL(NAME, T, NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS, kCpAsync)

#endif  // CUDAL2_DECODE_GEMM_CUH_
