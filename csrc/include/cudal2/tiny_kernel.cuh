// Device side of the tiny GEMM family: D[M, N] = A[M, K] @ op(B) (+ bias) for latency-bound problems (tiny GEMMs,
// and long K with a small M x N).
//
// Grid (n tiles, m tiles, splits): each CTA owns one kTileM x kTileN output tile and one K range. A and B tiles
// stream through a kStages-deep cp.async pipeline in shared memory (padded rows: conflict-free ldmatrix); the whole
// prologue is issued at once. Warps split the CTA tile as kWarpsM x kWarpsN warp tiles of 32 x 32 (mma.sync
// m16n8k16, fp32 accumulation) times kWarpsK groups that share the k16 steps of every K tile; the groups' partial sums
// are added in a fixed order through shared memory. With several splits (sm_90), the split CTAs of a tile form a
// thread-block cluster and sum their fp32 partial tiles in rank order over distributed shared memory
// (cluster_splitk.cuh). Results go from registers (or the cluster sum) straight to global memory: no workspace, no
// second kernel, bitwise deterministic.
#ifndef CUDAL2_TINY_KERNEL_CUH_
#define CUDAL2_TINY_KERNEL_CUH_

#include "cudal2/cluster_splitk.cuh"
#include "cudal2/cp_async_pipeline.cuh"
#include "cudal2/int_math.cuh"
#include "cudal2/mma_sync_ptx.cuh"
#include "cudal2/warp_group_reduce.cuh"

namespace cudal2 {
namespace tiny {

// Compile-time shape of one instantiation; shared by the kernel and its host launcher.
template <bool kNT_, int kTileM_, int kTileN_, int kTileK_, int kStages_, int kWarps_>
struct Traits {
  static constexpr bool kNT = kNT_;
  static constexpr int kTileM = kTileM_, kTileN = kTileN_, kTileK = kTileK_, kStages = kStages_;
  static constexpr int kWarps = kWarps_, kThreads = kWarps * 32;
  static constexpr int kWarpTile = 32;                       // each warp computes 32 x 32 outputs
  static constexpr int kWarpsM = kTileM / kWarpTile, kWarpsN = kTileN / kWarpTile;
  static constexpr int kWarpsMN = kWarpsM * kWarpsN;         // warps covering the CTA tile once
  static constexpr int kWarpsK = kWarps / kWarpsMN;          // groups of them splitting each K tile
  static constexpr int kMmaM = kWarpTile / 16, kMmaN = kWarpTile / 8;  // m16 x n8 mma tiles per warp
  static constexpr int kAccPerThread = kMmaM * kMmaN * 4;
  static constexpr int kKSteps = kTileK / 16;                // k16 steps per K tile
  // Shared-memory tiles: A as [kTileM][kTileK], B as [kTileN][kTileK] (NT) or [kTileK][kTileN] (NN); each row
  // padded by 16 bytes so that the 8 row addresses of an ldmatrix hit distinct bank groups.
  static constexpr int kAPitch = kTileK + 8;
  static constexpr int kBRows = kNT ? kTileN : kTileK;
  static constexpr int kBCols = kNT ? kTileK : kTileN;
  static constexpr int kBPitch = kBCols + 8;
  static constexpr int kStageElems = kTileM * kAPitch + kBRows * kBPitch;
  static constexpr int kPipeBytes = kStages * kStageElems * 2;
  static constexpr int kReduceBytes = warp_group_scratch_bytes<kAccPerThread, kWarpsK, kWarpsMN>();
  static constexpr int kClusterTileBytes = kTileM * kTileN * 4;  // fp32 partial tile [kTileM][kTileN]
  static constexpr int kSmemBytes = max_int(max_int(kPipeBytes, kReduceBytes), kClusterTileBytes);

  static_assert(kTileM % kWarpTile == 0 && kTileN % kWarpTile == 0, "tile_m and tile_n must be multiples of 32");
  static_assert(kTileK % 16 == 0, "tile_k must be a multiple of 16");
  static_assert(kWarpsK >= 1 && kWarps == kWarpsK * kWarpsMN, "warps must be a multiple of (tile_m/32)*(tile_n/32)");
  static_assert(kKSteps % kWarpsK == 0, "warps along K must divide tile_k/16");
  static_assert(kStages >= 2, "the pipeline needs at least 2 stages");
};

// Runtime arguments of one launch.
template <class T>
struct Params {
  const T* a;     // [M, K], row stride lda
  const T* b;     // NT: [N, K] (ldb); NN: [K, N] (ldb)
  T* d;           // [M, N], row stride ldd
  const T* bias;  // [N] or nullptr
  int m, n, k;
  long long lda, ldb, ldd;
  int splits;           // CTAs per output tile along K (grid z); > 1 only as a cluster on sm_90
  int tiles_per_split;  // K tiles of each split (the last one possibly fewer)
};

// Issues the cp.async copies of K tile `tile` (absolute index) of the CTA's A rows and B columns into
// `stage_smem`. Rows, columns and K beyond the problem are zero-filled (NN: a 16-byte chunk may straddle N).
template <class T, class Tr>
__device__ __forceinline__ void load_tile(const Params<T>& p, T* stage_smem, int m0, int n0, int tile) {
  const int k0 = tile * Tr::kTileK;
  constexpr int kAChunkCols = Tr::kTileK / 8, kAChunks = Tr::kTileM * kAChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kAChunks, Tr::kThreads); ++i) {
    const int c = threadIdx.x + i * Tr::kThreads;
    if (kAChunks % Tr::kThreads == 0 || c < kAChunks) {
      const int r = c / kAChunkCols, col = (c % kAChunkCols) * 8;
      const bool ok = m0 + r < p.m && k0 + col < p.k;
      const T* src = ok ? p.a + (m0 + r) * p.lda + k0 + col : p.a;
      cp_async_16(smem_addr(stage_smem + r * Tr::kAPitch + col), src, ok);
    }
  }
  T* b_smem = stage_smem + Tr::kTileM * Tr::kAPitch;
  constexpr int kBChunkCols = Tr::kBCols / 8, kBChunks = Tr::kBRows * kBChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kBChunks, Tr::kThreads); ++i) {
    const int c = threadIdx.x + i * Tr::kThreads;
    if (kBChunks % Tr::kThreads == 0 || c < kBChunks) {
      const int r = c / kBChunkCols, col = (c % kBChunkCols) * 8;
      const uint32_t dst = smem_addr(b_smem + r * Tr::kBPitch + col);
      if (Tr::kNT) {  // [n][k]: K % 8 == 0, so a chunk is wholly inside or outside
        const bool ok = n0 + r < p.n && k0 + col < p.k;
        cp_async_16(dst, ok ? p.b + (n0 + r) * p.ldb + k0 + col : p.b, ok);
      } else {  // [k][n]: the chunk holds columns n0 + col .. + 7, of which min(8, N - n0 - col) are inside
        const int bytes = k0 + r < p.k ? 2 * min_int(8, max_int(0, p.n - n0 - col)) : 0;
        cp_async_16_partial(dst, bytes ? p.b + (k0 + r) * p.ldb + n0 + col : p.b, bytes);
      }
    }
  }
}

// Register fragments of one k16 step: the warp's 32 rows of A (two m16 tiles) and 32 columns of B (four n8 tiles).
template <class Tr>
struct Fragments {
  uint32_t a[Tr::kMmaM][4];
  uint32_t b[Tr::kMmaN][2];
};

// Loads the fragments of the k16 step starting at column `ks` of the stage held in `stage_smem`.
template <class T, class Tr>
__device__ __forceinline__ void load_fragments(Fragments<Tr>& f, const T* stage_smem, int ks, int wm, int wn) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int mi = 0; mi < Tr::kMmaM; ++mi) {  // matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15)
    const int r = wm * Tr::kWarpTile + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks + (lane >> 4) * 8;
    ldmatrix_x4(f.a[mi], smem_addr(stage_smem + r * Tr::kAPitch + c));
  }
  const T* b_smem = stage_smem + Tr::kTileM * Tr::kAPitch;
#pragma unroll
  for (int nj = 0; nj < Tr::kMmaN / 2; ++nj) {  // two n8 tiles per ldmatrix_x4: (n 0-7 | 8-15) x (k 0-7 | 8-15)
    const int n = wn * Tr::kWarpTile + nj * 16;
    uint32_t r[4];
    if (Tr::kNT) {  // B stored [n][k]
      ldmatrix_x4(r, smem_addr(b_smem + (n + (lane & 7) + (lane >> 4) * 8) * Tr::kBPitch + ks + ((lane >> 3) & 1) * 8));
    } else {  // B stored [k][n]: transposed loads give the same fragments
      ldmatrix_x4_trans(r, smem_addr(b_smem + (ks + (lane & 7) + ((lane >> 3) & 1) * 8) * Tr::kBPitch + n +
                                     (lane >> 4) * 8));
    }
    f.b[2 * nj][0] = r[0];
    f.b[2 * nj][1] = r[1];
    f.b[2 * nj + 1][0] = r[2];
    f.b[2 * nj + 1][1] = r[3];
  }
}

// Accumulates this warp group's share of the k16 steps of one K tile held in `stage_smem`. Fragments are
// double-buffered so that the shared-memory loads of step s + 1 overlap the mma of step s.
template <class T, class Tr>
__device__ __forceinline__ void mma_tile(const T* stage_smem, float (&acc)[Tr::kMmaM][Tr::kMmaN][4], int wm, int wn,
                                         int wk) {
  constexpr int kSteps = Tr::kKSteps / Tr::kWarpsK;
  Fragments<Tr> frag[2];
  load_fragments<T, Tr>(frag[0], stage_smem, wk * 16, wm, wn);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s + 1 < kSteps) load_fragments<T, Tr>(frag[(s + 1) % 2], stage_smem, ((s + 1) * Tr::kWarpsK + wk) * 16, wm, wn);
#pragma unroll
    for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < Tr::kMmaN; ++ni) mma_16816<T>(acc[mi][ni], frag[s % 2].a[mi], frag[s % 2].b[ni]);
    }
  }
}

// Calls f(row, col, v0, v1) for every pair of horizontally adjacent accumulators of this warp: (row, col) and
// (row, col + 1) relative to the CTA tile (mma C fragment: rows g | g + 8, columns 2q, 2q + 1).
template <class Tr, class F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[Tr::kMmaM][Tr::kMmaN][4], int wm, int wn, F&& f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
    for (int ni = 0; ni < Tr::kMmaN; ++ni) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wm * Tr::kWarpTile + mi * 16 + g + h * 8, col = wn * Tr::kWarpTile + ni * 8 + 2 * q;
        f(row, col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
      }
    }
  }
}

// Writes D[m][n] = v0 (+ bias[n]) and D[m][n + 1] = v1 (+ bias[n + 1]) in the element type, skipping what lies
// outside the problem; one 4-byte store when both are inside and the address allows it.
template <class T>
__device__ __forceinline__ void store_pair(const Params<T>& p, int m, int n, float v0, float v1) {
  if (m >= p.m || n >= p.n) return;
  const bool both = n + 1 < p.n;
  if (p.bias != nullptr) {
    v0 += to_float(p.bias[n]);
    if (both) v1 += to_float(p.bias[n + 1]);
  }
  T* out = p.d + m * p.ldd + n;
  if (both && (reinterpret_cast<uintptr_t>(out) & 3) == 0) {
    struct alignas(4) Pair { T x, y; };
    *reinterpret_cast<Pair*>(out) = Pair{from_float<T>(v0), from_float<T>(v1)};
  } else {
    out[0] = from_float<T>(v0);
    if (both) out[1] = from_float<T>(v1);
  }
}

template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads) tiny_gemm_kernel(const Params<T> p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int warp = threadIdx.x >> 5, wmn = warp % Tr::kWarpsMN, wk = warp / Tr::kWarpsMN;
  const int wm = wmn / Tr::kWarpsN, wn = wmn % Tr::kWarpsN;
  const int n0 = blockIdx.x * Tr::kTileN, m0 = blockIdx.y * Tr::kTileM;
  const int tile_begin = blockIdx.z * p.tiles_per_split;
  const int num_tiles = min_int(ceil_div(p.k, Tr::kTileK) - tile_begin, p.tiles_per_split);  // >= 1 (host)

  float acc[Tr::kMmaM][Tr::kMmaN][4] = {};
  // Launched with PDL, the CTA may start while the preceding kernel finishes: wait for it before touching memory it
  // may write (inputs, output).
  pdl_wait_prerequisites();
  run_cp_async_pipeline<Tr::kStages>(
      num_tiles, [&](int stage, int t) { load_tile<T, Tr>(p, smem + stage * Tr::kStageElems, m0, n0, tile_begin + t); },
      [&](int stage) { mma_tile<T, Tr>(smem + stage * Tr::kStageElems, acc, wm, wn, wk); });
  if (Tr::kWarpsK > 1 || p.splits > 1) {
    cp_async_wait<0>();
    __syncthreads();  // the pipeline buffers are reused as reduction scratch
  }
  reduce_warp_groups<Tr::kAccPerThread, Tr::kWarpsK, Tr::kWarpsMN>(&acc[0][0][0], reinterpret_cast<float*>(smem_raw),
                                                                   wmn, wk);
  if (p.splits == 1) {
    if (wk == 0) for_each_pair<Tr>(acc, wm, wn, [&](int r, int c, float v0, float v1) { store_pair(p, m0 + r, n0 + c, v0, v1); });
    return;
  }
  float* tile = reinterpret_cast<float*>(smem_raw);  // [kTileM][kTileN] fp32 partial of this CTA's K range
  if (Tr::kWarpsK > 1) __syncthreads();             // the warp-group scratch has been read
  if (wk == 0) {
    for_each_pair<Tr>(acc, wm, wn, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(tile + r * Tr::kTileN + c) = make_float2(v0, v1);
    });
  }
  cluster_reduce_tile<Tr::kTileN>(tile, min_int(Tr::kTileM, p.m - m0), p.splits, [&](int r, int c, float4 sum) {
    store_pair(p, m0 + r, n0 + c, sum.x, sum.y);
    store_pair(p, m0 + r, n0 + c + 2, sum.z, sum.w);
  });
}

}  // namespace tiny
}  // namespace cudal2

#endif  // CUDAL2_TINY_KERNEL_CUH_
