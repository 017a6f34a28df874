// Device side of the decode GEMM family: D[M, N] = A[M, K] @ op(B) (+ bias) for small M (<= kTileM <= 64).
//
// The GEMM is computed transposed, D^T = W @ A^T, so the weight W (B, [N, K] for NT or [K, N] for NN) is the
// 16-row operand of mma.sync m16n8k16 and the small M is the 8-wide side. Each CTA owns kTileN rows of W and one
// K range (split-K across blockIdx.y). W and A tiles stream through a kStages-deep cp.async pipeline in shared
// memory (padded rows: conflict-free ldmatrix); warps split the CTA tile as kWarpsN x kWarpsK and the kWarpsK
// partial sums are added in a fixed order through shared memory. With several splits, either the split CTAs of a
// tile form a thread-block cluster and reduce their fp32 partial tiles over distributed shared memory
// (cluster_splitk.cuh; sm_90, up to kMaxClusterSplits parts), or each CTA writes its partial tile to the workspace
// and a second kernel on the same stream sums the partials. Both sum in split order: results are bitwise
// deterministic and equal, and nothing needs zeroing between calls.
// The weight stream is a template choice (decode_weight_stream.cuh): cp.async into padded rows (default), the same
// with an L2 evict-first hint, or 2-D TMA boxes into 128-byte swizzled rows (decode_gemm_tma_kernel, sm_90).
#ifndef CUDAL2_DECODE_KERNEL_CUH_
#define CUDAL2_DECODE_KERNEL_CUH_

#include "cudal2/cluster_splitk.cuh"
#include "cudal2/cp_async_pipeline.cuh"
#include "cudal2/decode_weight_stream.cuh"
#include "cudal2/int_math.cuh"
#include "cudal2/mma_sync_ptx.cuh"
#include "cudal2/warp_group_reduce.cuh"

namespace cudal2 {
namespace decode {

// Compile-time shape of one instantiation; shared by the kernel and its host launcher.
template <bool kNT_, int kTileM_, int kTileN_, int kTileK_, int kStages_, int kWarps_,
          WeightStream kStream_ = WeightStream::kCpAsync>
struct Traits {
  static constexpr bool kNT = kNT_;
  static constexpr WeightStream kStream = kStream_;
  static constexpr bool kTma = kStream == WeightStream::kTma;
  static constexpr int kTileM = kTileM_, kTileN = kTileN_, kTileK = kTileK_, kStages = kStages_;
  static constexpr int kWarps = kWarps_, kThreads = kWarps * 32;
  static constexpr int kWarpsN = min_int(kWarps, kTileN / 16);  // warps side by side along N
  static constexpr int kWarpsK = kWarps / kWarpsN;               // warps splitting each K tile
  static constexpr int kRowTiles = kTileN / 16 / kWarpsN;        // 16-row mma tiles per warp
  static constexpr int kMTiles = kTileM / 8;                     // 8-wide mma tiles along M
  static constexpr int kKSteps = kTileK / 16;                    // k16 steps per K tile
  // Shared-memory tiles: W as [kTileN][kTileK] (NT) or [kTileK][kTileN] (NN), A as [kTileM][kTileK]. Rows are
  // padded by 16 bytes so that the 8 row addresses of an ldmatrix hit distinct bank groups, except W's under TMA,
  // which are dense and swizzled (swizzled_box_offset) in stages aligned to 1024 bytes (kAlignSlack bytes of room
  // to align the dynamic shared memory), followed by one mbarrier per stage at kBarrierOffset.
  static constexpr int kWRows = kNT ? kTileN : kTileK;
  static constexpr int kWCols = kNT ? kTileK : kTileN;
  static constexpr int kWPitch = kWCols + 8;
  static constexpr int kXPitch = kTileK + 8;
  static constexpr int kWTileElems = kTma ? kWRows * kWCols : kWRows * kWPitch;
  static constexpr int kStageElems = kTma ? ceil_div(kWTileElems + kTileM * kXPitch, 512) * 512
                                          : kWTileElems + kTileM * kXPitch;
  static constexpr int kAlignSlack = kTma ? 1024 : 0;
  static constexpr int kPipeBytes = kAlignSlack + kStages * kStageElems * 2;
  static constexpr int kReduceBytes = (kWarpsK - 1) * kTileN * kTileM * 4;
  static constexpr int kClusterTileBytes = kTileM * kTileN * 4;  // fp32 partial tile [kTileM][kTileN]
  static constexpr int kBarrierOffset = max_int(max_int(kPipeBytes, kReduceBytes), kClusterTileBytes);
  static constexpr int kSmemBytes = kBarrierOffset + (kTma ? kStages * 8 : 0);
  // Resident CTAs per SM on sm_90 (227 KiB of shared memory, 2048 threads): used to size the automatic split-K.
  static constexpr int kCtasPerSm = max_int(1, min_int(232448 / (kSmemBytes + 1024), 2048 / kThreads));

  static_assert(kTileM % 8 == 0 && kTileM >= 8 && kTileM <= 64, "tile_m must be 8, 16, ..., 64");
  static_assert(kTileN % 16 == 0 && kTileK % 16 == 0, "tile_n and tile_k must be multiples of 16");
  static_assert(kWarps % kWarpsN == 0 && (kTileN / 16) % kWarpsN == 0, "warps must divide or be a multiple of tile_n/16");
  static_assert(kKSteps % kWarpsK == 0, "warps along K must divide tile_k/16");
  static_assert(kStages >= 2, "the pipeline needs at least 2 stages");
  static_assert(!kTma || kWCols % kTmaBoxCols == 0, "TMA: the W tile's rows must be whole 64-element boxes");

  // Element offset of W's (row, col) in a stage.
  __host__ __device__ static constexpr int w_offset(int row, int col) {
    return kTma ? swizzled_box_offset(kWRows, row, col) : row * kWPitch + col;
  }
};

// Runtime arguments of one launch.
template <class T>
struct Params {
  const T* a;       // [M, K], row stride lda
  const T* b;       // NT: [N, K] (ldb); NN: [K, N] (ldb)
  T* d;             // [M, N], row stride ldd
  const T* bias;    // [N] or nullptr
  float* partials;  // [splits][M][N] fp32 workspace (splits > 1 without cluster_reduce)
  int m, n, k;
  long long lda, ldb, ldd;
  int splits, tiles_per_split;
  bool cluster_reduce;  // the splits of a tile form a cluster (grid y) and reduce in distributed shared memory
};

// Issues the cp.async copies of the W part of K tile `tile` (absolute index) into stage buffer `stage_smem`, with L2
// cache policy `policy` under WeightStream::kCpAsyncEvictFirst.
template <class T, class Tr>
__device__ __forceinline__ void load_w_tile(const Params<T>& p, T* stage_smem, int n0, int tile, uint64_t policy) {
  const int k0 = tile * Tr::kTileK;
  constexpr int kWChunkCols = Tr::kWCols / 8, kWChunks = Tr::kWRows * kWChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kWChunks, Tr::kThreads); ++i) {
    const int c = threadIdx.x + i * Tr::kThreads;
    if (kWChunks % Tr::kThreads == 0 || c < kWChunks) {
      const int r = c / kWChunkCols, col = (c % kWChunkCols) * 8;
      const int gr = Tr::kNT ? n0 + r : k0 + r, gc = Tr::kNT ? k0 + col : n0 + col;
      const bool ok = Tr::kNT ? (gr < p.n && gc < p.k) : (gr < p.k && gc < p.n);
      const T* src = ok ? p.b + gr * p.ldb + gc : p.b;
      const uint32_t dst = smem_addr(stage_smem + Tr::w_offset(r, col));
      if constexpr (Tr::kStream == WeightStream::kCpAsyncEvictFirst) {
        cp_async_16_hint(dst, src, ok, policy);
      } else {
        cp_async_16(dst, src, ok);
      }
    }
  }
}

// Issues the cp.async copies of the activation part of K tile `tile` (its first `x_rows` rows) into `stage_smem`.
template <class T, class Tr>
__device__ __forceinline__ void load_x_tile(const Params<T>& p, T* stage_smem, int tile, int x_rows) {
  const int k0 = tile * Tr::kTileK;
  T* x_smem = stage_smem + Tr::kWTileElems;
  constexpr int kXChunkCols = Tr::kTileK / 8, kXChunks = Tr::kTileM * kXChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kXChunks, Tr::kThreads); ++i) {
    const int c = threadIdx.x + i * Tr::kThreads;
    const int r = c / kXChunkCols, col = (c % kXChunkCols) * 8;
    if (r < x_rows) {  // rows of inactive M tiles are never read
      const bool ok = r < p.m && k0 + col < p.k;
      const T* src = ok ? p.a + r * p.lda + k0 + col : p.a;
      cp_async_16(smem_addr(x_smem + r * Tr::kXPitch + col), src, ok);
    }
  }
}

// Register fragments of one k16 step: the warp's W rows (mma A operand) and the active M tiles (B operand).
template <class Tr>
struct Fragments {
  uint32_t a[Tr::kRowTiles][4];
  uint32_t b[Tr::kMTiles][2];
};

// Loads the fragments of the k16 step starting at column `ks` of the stage held in `stage_smem`.
template <class T, class Tr>
__device__ __forceinline__ void load_fragments(Fragments<Tr>& f, const T* stage_smem, int ks, int wn, int m_tiles) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int rt = 0; rt < Tr::kRowTiles; ++rt) {
    const int row0 = (wn * Tr::kRowTiles + rt) * 16;
    if (Tr::kNT) {  // W stored [n][k]: matrices (rows 0-7|8-15) x (k 0-7|8-15)
      const int r = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks + (lane >> 4) * 8;
      ldmatrix_x4(f.a[rt], smem_addr(stage_smem + Tr::w_offset(r, c)));
    } else {  // W stored [k][n]: transposed loads give the same fragments
      const int r = ks + (lane & 7) + (lane >> 4) * 8, c = row0 + ((lane >> 3) & 1) * 8;
      ldmatrix_x4_trans(f.a[rt], smem_addr(stage_smem + Tr::w_offset(r, c)));
    }
  }
  const T* x_smem = stage_smem + Tr::kWTileElems;
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
    if (mt < m_tiles) {
      const int r = mt * 8 + (lane & 7), c = ks + ((lane >> 3) & 1) * 8;
      ldmatrix_x2(f.b[mt], smem_addr(x_smem + r * Tr::kXPitch + c));
    }
  }
}

// acc += the products of one k16 step's fragments (inactive M tiles skipped).
template <class T, class Tr>
__device__ __forceinline__ void mma_fragments(float (&acc)[Tr::kRowTiles][Tr::kMTiles][4], const Fragments<Tr>& f,
                                              int m_tiles) {
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
    if (mt < m_tiles) {
#pragma unroll
      for (int rt = 0; rt < Tr::kRowTiles; ++rt) mma_16816<T>(acc[rt][mt], f.a[rt], f.b[mt]);
    }
  }
}

// Accumulates one K tile held in `stage_smem` into acc (this warp's rows, its share of the k16 steps). Fragments
// are double-buffered so that the shared-memory loads of step s + 1 overlap the mma of step s.
template <class T, class Tr>
__device__ __forceinline__ void mma_tile(const T* stage_smem, float (&acc)[Tr::kRowTiles][Tr::kMTiles][4], int wn,
                                         int wk, int m_tiles) {
  constexpr int kSteps = Tr::kKSteps / Tr::kWarpsK;
  Fragments<Tr> frag[2];
  load_fragments<T, Tr>(frag[0], stage_smem, wk * 16, wn, m_tiles);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s + 1 < kSteps) load_fragments<T, Tr>(frag[(s + 1) % 2], stage_smem, ((s + 1) * Tr::kWarpsK + wk) * 16, wn, m_tiles);
    mma_fragments<T, Tr>(acc, frag[s % 2], m_tiles);
  }
}

// Adds the accumulators of warps wk > 0 into those of warp wk == 0 (same wn), in increasing wk order.
template <class Tr>
__device__ __forceinline__ void reduce_warps_k(float (&acc)[Tr::kRowTiles][Tr::kMTiles][4], float* scratch, int wn,
                                               int wk) {
  reduce_warp_groups<Tr::kRowTiles * Tr::kMTiles * 4, Tr::kWarpsK, Tr::kWarpsN>(&acc[0][0][0], scratch, wn, wk);
}

// Calls f(m, n, value) for every accumulator element of this warp that lies inside the problem.
template <class Tr, class F>
__device__ __forceinline__ void for_each_output(const float (&acc)[Tr::kRowTiles][Tr::kMTiles][4], int m, int n,
                                                int n0, int wn, F&& f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int rt = 0; rt < Tr::kRowTiles; ++rt) {
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // mma C fragment: (row g | g+8) x (col 2q | 2q+1), rows = n, cols = m
        const int row = n0 + (wn * Tr::kRowTiles + rt) * 16 + g + (j >> 1) * 8;
        const int col = mt * 8 + 2 * q + (j & 1);
        if (col < m && row < n) f(col, row, acc[rt][mt][j]);
      }
    }
  }
}

// Writes out[m][n] = value + bias[n] in the element type.
template <class T>
__device__ __forceinline__ void store_output(const Params<T>& p, int m, int n, float value) {
  if (p.bias != nullptr) value += to_float(p.bias[n]);
  p.d[m * p.ldd + n] = from_float<T>(value);
}

// Where one CTA works: its W rows (n0), its K tiles (split, tile_begin, num_tiles) and its warp's place.
template <class Tr>
struct CtaWork {
  int warp, wn, wk, n0, split, tile_begin, num_tiles, m_tiles;

  template <class T>
  __device__ __forceinline__ explicit CtaWork(const Params<T>& p)
      : warp(threadIdx.x >> 5),
        wn(warp % Tr::kWarpsN),
        wk(warp / Tr::kWarpsN),
        n0(blockIdx.x * Tr::kTileN),
        split(blockIdx.y),
        tile_begin(split * p.tiles_per_split),
        num_tiles(min_int(ceil_div(p.k, Tr::kTileK) - tile_begin, p.tiles_per_split)),  // >= 1 (host)
        m_tiles(ceil_div(p.m, 8)) {}
};

// After the main loop (every stage consumed): adds the warps' K shares, then writes the CTA's tile of D, or reduces
// it with the other splits' over the cluster, or writes the fp32 partial tile to the workspace. `smem_raw` (the
// dynamic shared memory) is reused as scratch.
template <class T, class Tr>
__device__ __forceinline__ void finish_tile(const Params<T>& p, const CtaWork<Tr>& w,
                                            float (&acc)[Tr::kRowTiles][Tr::kMTiles][4], unsigned char* smem_raw) {
  cp_async_wait<0>();
  __syncthreads();  // pipeline buffers are reused as reduction scratch
  reduce_warps_k<Tr>(acc, reinterpret_cast<float*>(smem_raw), w.wn, w.wk);

  if (p.cluster_reduce) {
    float* tile = reinterpret_cast<float*>(smem_raw);  // [kTileM][kTileN]: row = m, column = n - n0
    __syncthreads();  // the warp-reduction scratch has been read
    if (w.wk == 0) {
      for_each_output<Tr>(acc, p.m, p.n, w.n0, w.wn,
                          [&](int m, int n, float v) { tile[m * Tr::kTileN + n - w.n0] = v; });
    }
    cluster_reduce_tile<Tr::kTileN>(tile, p.m, p.splits, [&](int m, int col, float4 sum) {
      const float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (w.n0 + col + j < p.n) store_output(p, m, w.n0 + col + j, v[j]);
      }
    });
    return;
  }
  if (w.wk != 0) return;
  if (p.splits == 1) {
    for_each_output<Tr>(acc, p.m, p.n, w.n0, w.wn, [&](int m, int n, float v) { store_output(p, m, n, v); });
  } else {
    float* mine = p.partials + w.split * static_cast<long long>(p.m) * p.n;
    for_each_output<Tr>(acc, p.m, p.n, w.n0, w.wn,
                        [&](int m, int n, float v) { mine[static_cast<long long>(m) * p.n + n] = v; });
  }
}

// The GEMM with a cp.async weight stream (WeightStream::kCpAsync or kCpAsyncEvictFirst).
template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads) decode_gemm_kernel(const Params<T> p) {
  static_assert(!Tr::kTma, "TMA weight streams run decode_gemm_tma_kernel");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const CtaWork<Tr> w(p);
  float acc[Tr::kRowTiles][Tr::kMTiles][4] = {};
  // Launched with PDL, the CTA may start while the preceding kernel finishes: wait for it before touching memory it
  // may write (activations, weight, workspace, output).
  pdl_wait_prerequisites();
  const uint64_t policy = Tr::kStream == WeightStream::kCpAsyncEvictFirst ? l2_evict_first_policy() : 0;
  // The next kernel (split-K reduction, next GEMM) may get scheduled after the prologue; it waits for this grid.
  run_cp_async_pipeline<Tr::kStages>(
      w.num_tiles,
      [&](int stage, int t) {
        T* stage_smem = smem + stage * Tr::kStageElems;
        load_w_tile<T, Tr>(p, stage_smem, w.n0, w.tile_begin + t, policy);
        load_x_tile<T, Tr>(p, stage_smem, w.tile_begin + t, w.m_tiles * 8);
      },
      [&](int stage) { mma_tile<T, Tr>(smem + stage * Tr::kStageElems, acc, w.wn, w.wk, w.m_tiles); });
  finish_tile<T, Tr>(p, w, acc, smem_raw);
}

// Launch arguments of the TMA weight stream: Params and the weight's tensor map (decode_weight_map.h).
template <class T>
struct TmaParams : Params<T> {
  CUtensorMap w_map;
};

// Issues (one thread) the TMA copies of the W part of K tile `tile` into `stage_smem`: kWCols / 64 boxes of
// [kWRows][64], all completing on mbarrier `bar`.
template <class T, class Tr>
__device__ __forceinline__ void load_w_tile_tma(const CUtensorMap* map, T* stage_smem, uint32_t bar, int n0, int tile,
                                                uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int k0 = tile * Tr::kTileK;
  mbarrier_arrive_expect_tx(bar, Tr::kWRows * Tr::kWCols * static_cast<int>(sizeof(T)));
#pragma unroll
  for (int box = 0; box < Tr::kWCols / kTmaBoxCols; ++box) {
    const int col = box * kTmaBoxCols;  // NT: c0 = k, c1 = n; NN: c0 = n, c1 = k
    tma_load_2d(smem_addr(stage_smem + Tr::w_offset(0, col)), map, bar, Tr::kNT ? k0 + col : n0 + col,
                Tr::kNT ? n0 : k0, policy);
  }
#endif
}

// The GEMM with the TMA weight stream (sm_90; the launcher refuses older devices). Thread 0 issues each stage's
// weight boxes on that stage's mbarrier while every thread issues its activation cp.async copies; before computing
// a stage each thread waits for the cp.async group (the pipeline) and for the mbarrier phase of that stage's use.
template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads) decode_gemm_tma_kernel(const __grid_constant__ TmaParams<T> p) {
  static_assert(Tr::kTma, "cp.async weight streams run decode_gemm_kernel");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  T* smem = reinterpret_cast<T*>(smem_raw + ((1024 - raw % 1024) % 1024));  // TMA's 128-byte swizzle: 1 KiB aligned
  const uint32_t full = raw + Tr::kBarrierOffset;                            // kStages mbarriers, 8 bytes each
  const CtaWork<Tr> w(p);
  float acc[Tr::kRowTiles][Tr::kMTiles][4] = {};
  if (threadIdx.x == 0) {
    for (int s = 0; s < Tr::kStages; ++s) mbarrier_init(full + 8 * s, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  pdl_wait_prerequisites();
  const uint64_t policy = l2_evict_first_policy();
  int consumed = 0;  // stages consumed so far: the mbarrier phase parity flips each time the ring wraps
  run_cp_async_pipeline<Tr::kStages>(
      w.num_tiles,
      [&](int stage, int t) {
        T* stage_smem = smem + stage * Tr::kStageElems;
        if (threadIdx.x == 0) {
          load_w_tile_tma<T, Tr>(&p.w_map, stage_smem, full + 8 * stage, w.n0, w.tile_begin + t, policy);
        }
        load_x_tile<T, Tr>(p, stage_smem, w.tile_begin + t, w.m_tiles * 8);
      },
      [&](int stage) {
        mbarrier_wait(full + 8 * stage, (consumed++ / Tr::kStages) & 1);
        mma_tile<T, Tr>(smem + stage * Tr::kStageElems, acc, w.wn, w.wk, w.m_tiles);
      });
  finish_tile<T, Tr>(p, w, acc, smem_raw);
#endif
}

// Split-K epilogue: out[m][n] = sum over s = 0, 1, ... of partials[s][m][n] (+ bias), one thread per output.
template <class T>
__global__ void __launch_bounds__(256) decode_splitk_reduce_kernel(const Params<T> p) {
  pdl_wait_prerequisites();  // launched early (programmatic dependent launch) on sm_90
  const long long plane = static_cast<long long>(p.m) * p.n;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= plane) return;
  float sum = 0.f;
#pragma unroll 8
  for (int s = 0; s < p.splits; ++s) sum += __ldcg(p.partials + s * plane + idx);
  store_output(p, static_cast<int>(idx / p.n), static_cast<int>(idx % p.n), sum);
}

}  // namespace decode
}  // namespace cudal2

#endif  // CUDAL2_DECODE_KERNEL_CUH_
