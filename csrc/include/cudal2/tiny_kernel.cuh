// Device side of the tiny GEMM family (third version): D[M, N] = A[M, K] @ op(B) (+ bias) for latency-bound problems
// (tiny GEMMs, and long K with a small M x N), built for the shortest path through one CTA.
//
// Grid (n tiles, m tiles, splits): each CTA owns one kTileM x kTileN output tile and one K range. The warps covering
// the tile (kWarpsMN <= 4 warp tiles of 16 or 32 per side, warp_layout below: M x N first) run alone when the K range
// is short; only a long K range adds kWarpsK groups of them that share the k16 steps of every K tile (the launcher
// picks, runtime `warp_groups`: two compiled bodies). When the CTA's K range fits the kStages buffers, every K tile is
// requested at once, then one wait and one barrier: one memory round trip, and only the stages it uses are allocated
// (the launcher sizes the dynamic shared memory); longer ranges stream through the kStages-deep cp.async pipeline
// (padded rows: conflict-free ldmatrix). mma.sync m16n8k16, fp32 accumulation. With one warp group and no split, the
// results go from registers straight to global memory: the bias, loaded into registers before the main loop, is added
// in fp32, a 4x4 shuffle transpose inside each quad of lanes gives every lane 8 consecutive outputs of one row, stored
// with one 16-byte store (fewer, full-sector stores; no shared memory, no barrier). Otherwise partial sums meet in a
// receive buffer in shared memory past the stages used: every warp group writes its partial tile there (with several
// splits on sm_90 the split CTAs of a tile form a thread-block cluster, and each CTA writes the rows another CTA owns
// straight into that CTA's buffer), one barrier, then each CTA sums the rows it owns over the sources in a fixed order
// and stores them. No workspace, no second kernel, bitwise deterministic. More split CTAs than a cluster holds reduce
// across the grid instead (a cooperative launch, every CTA resident at once): each writes its partial rows into the
// owners' slots of a caller-provided fp32 workspace, one grid barrier, then each CTA sums the rows it owns the same way
// (reading the workspace past L1). Still one kernel and deterministic; the workspace is written before it is read, so
// its contents at entry do not matter.
#ifndef CUDAL2_TINY_KERNEL_CUH_
#define CUDAL2_TINY_KERNEL_CUH_

#include <cooperative_groups.h>

#include "cudal2/cluster_exchange.cuh"
#include "cudal2/cluster_splitk.cuh"
#include "cudal2/cp_async_pipeline.cuh"
#include "cudal2/int_math.cuh"
#include "cudal2/mma_sync_ptx.cuh"

namespace cudal2 {
namespace tiny {

// Largest split count: the cluster size with the non-portable attribute on sm_90 (the host falls back to 8, or 1,
// when the device cannot co-schedule such a cluster of this kernel).
constexpr int kMaxSplits = kMaxNonPortableClusterSize;
// Most warps covering the tile once (one warpgroup): more would only add threads to launch and synchronise on a
// tile whose math takes a few mma per warp.
constexpr int kMaxCoveringWarps = 4;

// How the warps of a CTA cover its tile: m x n warp tiles of tile_m x tile_n outputs times `k` groups along K.
struct WarpLayout {
  int m, n, k;                // warps along M, N and K (k: the most groups; a launch uses 1 or k)
  int tile_m, tile_n;         // outputs per warp
};

// The layout of `warps` warps over a tile_m x tile_n x tile_k CTA tile (all powers of two): warp tiles start at
// min(32, tile) per side and halve their larger side (N on a tie) down to 16 while the covering warps stay within
// min(warps, kMaxCoveringWarps); the warps left over form K groups (at most tile_k / 16). The family's Python model
// (families/tiny.py) mirrors it; a layout whose warps do not fit comes out with m * n * k != warps (Traits rejects
// it).
__host__ __device__ constexpr WarpLayout warp_layout(int tile_m, int tile_n, int tile_k, int warps) {
  WarpLayout w{0, 0, 0, min_int(32, tile_m), min_int(32, tile_n)};
  const int most = min_int(warps, kMaxCoveringWarps);
  while ((tile_m / w.tile_m) * (tile_n / w.tile_n) * 2 <= most) {
    if (w.tile_n >= w.tile_m && w.tile_n > 16) {
      w.tile_n /= 2;
    } else if (w.tile_m > 16) {
      w.tile_m /= 2;
    } else {
      break;
    }
  }
  w.m = tile_m / w.tile_m;
  w.n = tile_n / w.tile_n;
  w.k = min_int(max_int(1, warps / (w.m * w.n)), tile_k / 16);
  return w;
}

// Compile-time shape of one instantiation; shared by the kernel and its host launcher.
template <bool kNT_, int kTileM_, int kTileN_, int kTileK_, int kStages_, int kWarps_>
struct Traits {
  static constexpr bool kNT = kNT_;
  static constexpr int kTileM = kTileM_, kTileN = kTileN_, kTileK = kTileK_, kStages = kStages_;
  static constexpr int kWarps = kWarps_, kThreads = kWarps * 32;             // with every K group
  static constexpr WarpLayout kLayout = warp_layout(kTileM, kTileN, kTileK, kWarps);
  static constexpr int kWarpsM = kLayout.m, kWarpsN = kLayout.n, kWarpsK = kLayout.k;
  static constexpr int kWarpTileM = kLayout.tile_m, kWarpTileN = kLayout.tile_n;
  static constexpr int kWarpsMN = kWarpsM * kWarpsN;                         // warps covering the CTA tile once
  static constexpr int kMmaM = kWarpTileM / 16, kMmaN = kWarpTileN / 8;      // m16 x n8 mma tiles per warp
  static constexpr int kKSteps = kTileK / 16;                                // k16 steps per K tile
  // Shared-memory tiles: A as [kTileM][kTileK], B as [kTileN][kTileK] (NT) or [kTileK][kTileN] (NN); each row
  // padded by 16 bytes so that the 8 row addresses of an ldmatrix hit distinct bank groups.
  static constexpr int kAPitch = kTileK + 8;
  static constexpr int kBRows = kNT ? kTileN : kTileK;
  static constexpr int kBCols = kNT ? kTileK : kTileN;
  static constexpr int kBPitch = kBCols + 8;
  static constexpr int kStageElems = kTileM * kAPitch + kBRows * kBPitch;
  static constexpr int kStageBytes = kStageElems * 2;
  // Receive buffer (fp32), past the stages a launch uses: `groups` sources per split, each ceil(kTileM / splits)
  // owned rows per CTA, of kTileN + 8 floats (the pad spreads the 8 rows of an mma C fragment over distinct banks);
  // none with one group and no split (the results go from registers to global memory).
  static constexpr int kRecvPitch = kTileN + 8;
  __host__ __device__ static constexpr int recv_bytes(int groups, int splits) {
    return groups * splits > 1 ? groups * splits * ceil_div(kTileM, splits) * kRecvPitch * 4 : 0;
  }
  // Dynamic shared memory of a launch with `stages` stage buffers, `groups` K groups and `splits` split CTAs.
  __host__ __device__ static constexpr int smem_bytes(int stages, int groups, int splits) {
    return stages * kStageBytes + recv_bytes(groups, splits);
  }
  // The most any launch uses (every stage, every K group, 16 splits; s * ceil(m / s) <= m + s - 1): what the device
  // must grant (can_implement) and the family model's smem_bytes().
  static constexpr int kSmemBytes = kStages * kStageBytes + kWarpsK * (kTileM + kMaxSplits - 1) * kRecvPitch * 4;

  static_assert(kTileM % 16 == 0 && kTileN % 16 == 0, "tile_m and tile_n must be multiples of 16");
  static_assert(kTileK % 16 == 0, "tile_k must be a multiple of 16");
  static_assert(kWarpsMN * kWarpsK == kWarps, "warps must be the covering warps (16..32 x 16..32 warp tiles, at most "
                "4 unless the tile needs more) times K groups (at most tile_k / 16)");
  static_assert(kMmaN == 2 || kMmaN == 4, "warp tiles are 16 or 32 wide");
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
  int splits;           // CTAs per output tile along K (grid z); > 1 as a cluster on sm_90, or across the grid
  float* partials;      // grid-wide split: the fp32 workspace of every tile's partial rows (grid_tile_floats());
                        // nullptr when the split CTAs of a tile form a cluster (or there is no split)
  int tiles_per_split;  // K tiles of each split (the last one possibly fewer)
  int warp_groups;      // 1 or Traits::kWarpsK: K groups of covering warps (blockDim = kWarpsMN * warp_groups warps)
  bool vector_store;    // D 16-byte aligned with ldd % 8 == 0: 8 outputs of a row in one 16-byte store
};

// Issues the cp.async copies of K tile `tile` (absolute index) of the CTA's A rows and B columns into
// `stage_smem`, spread over kThreads threads. Rows, columns and K beyond the problem are zero-filled (NN: a 16-byte
// chunk may straddle N).
template <class T, class Tr, int kThreads>
__device__ __forceinline__ void load_tile(const Params<T>& p, T* stage_smem, int m0, int n0, int tile) {
  const int k0 = tile * Tr::kTileK;
  constexpr int kAChunkCols = Tr::kTileK / 8, kAChunks = Tr::kTileM * kAChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kAChunks, kThreads); ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (kAChunks % kThreads == 0 || c < kAChunks) {
      const int r = c / kAChunkCols, col = (c % kAChunkCols) * 8;
      const bool ok = m0 + r < p.m && k0 + col < p.k;
      const T* src = ok ? p.a + (m0 + r) * p.lda + k0 + col : p.a;
      cp_async_16(smem_addr(stage_smem + r * Tr::kAPitch + col), src, ok);
    }
  }
  T* b_smem = stage_smem + Tr::kTileM * Tr::kAPitch;
  constexpr int kBChunkCols = Tr::kBCols / 8, kBChunks = Tr::kBRows * kBChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kBChunks, kThreads); ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (kBChunks % kThreads == 0 || c < kBChunks) {
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

// Register fragments of one k16 step: the warp's kWarpTileM rows of A (m16 tiles) and kWarpTileN columns of B (n8
// tiles).
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
    const int r = wm * Tr::kWarpTileM + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks + (lane >> 4) * 8;
    ldmatrix_x4(f.a[mi], smem_addr(stage_smem + r * Tr::kAPitch + c));
  }
  const T* b_smem = stage_smem + Tr::kTileM * Tr::kAPitch;
#pragma unroll
  for (int nj = 0; nj < Tr::kMmaN / 2; ++nj) {  // two n8 tiles per ldmatrix_x4: (n 0-7 | 8-15) x (k 0-7 | 8-15)
    const int n = wn * Tr::kWarpTileN + nj * 16;
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

// Accumulates this warp's share (k16 steps wk, wk + kGroups, ...) of one K tile held in `stage_smem`. Fragments are
// double-buffered so that the shared-memory loads of the next step overlap the mma of this one.
template <class T, class Tr, int kGroups>
__device__ __forceinline__ void mma_tile(const T* stage_smem, float (&acc)[Tr::kMmaM][Tr::kMmaN][4], int wm, int wn,
                                         int wk) {
  constexpr int kSteps = ceil_div(Tr::kKSteps, kGroups);  // the last may be absent for some groups
  Fragments<Tr> frag[2];
  load_fragments<T, Tr>(frag[0], stage_smem, wk * 16, wm, wn);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int step = s * kGroups + wk;
    if (Tr::kKSteps % kGroups != 0 && step >= Tr::kKSteps) break;
    if (step + kGroups < Tr::kKSteps) load_fragments<T, Tr>(frag[(s + 1) % 2], stage_smem, (step + kGroups) * 16, wm, wn);
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
    for (int h = 0; h < 2; ++h) {
      const int row = wm * Tr::kWarpTileM + mi * 16 + g + h * 8;
#pragma unroll
      for (int ni = 0; ni < Tr::kMmaN; ++ni) {
        f(row, wn * Tr::kWarpTileN + ni * 8 + 2 * q, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
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

// Two outputs in the element type, packed as D holds them (the lower address in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float v0, float v1) {
  struct alignas(4) Pair { T x, y; } pair{from_float<T>(v0), from_float<T>(v1)};
  uint32_t word;
  memcpy(&word, &pair, 4);
  return word;
}

// The bias of this lane's accumulator columns (n8 tile ni: columns 2q, 2q + 1 of the warp tile) in fp32, 0 outside
// N or without bias. Loaded before the main loop, so that its latency hides behind the operands' round trip.
template <class T, class Tr>
__device__ __forceinline__ void load_bias(const Params<T>& p, float (&bias)[Tr::kMmaN][2], int n0, int wn) {
  const int q = threadIdx.x & 3;
#pragma unroll
  for (int ni = 0; ni < Tr::kMmaN; ++ni) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = n0 + wn * Tr::kWarpTileN + ni * 8 + 2 * q + j;
      bias[ni][j] = p.bias != nullptr && n < p.n ? to_float(p.bias[n]) : 0.f;
    }
  }
}

// Stores this warp's outputs straight from registers (one warp group, no split). The accumulators come in groups of
// four 8-column pieces (n8 tiles) of the warp tile: four consecutive pieces of one row when the warp tile is 32 wide,
// else the two pieces of rows g and g + 8. In each quad of lanes, lane q holds columns 2q, 2q + 1 of every piece; a
// 4x4 transpose by shuffles (3 rounds, one 4-byte word each) gives lane q all 8 columns of piece q, which it stores
// with one 16-byte store (a full 32-byte sector per row and quad, or two), else element by element at the N edge or
// when D's rows are not 16-byte aligned.
template <class T, class Tr>
__device__ __forceinline__ void store_from_registers(const Params<T>& p, const float (&acc)[Tr::kMmaM][Tr::kMmaN][4],
                                                     const float (&bias)[Tr::kMmaN][2], int m0, int n0, int wm,
                                                     int wn) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  constexpr int kRowsPerGroup = Tr::kMmaN == 4 ? 1 : 2;  // rows g and g + 8 share a group of 16-wide warp tiles
#pragma unroll
  for (int mi = 0; mi < Tr::kMmaM; ++mi) {
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += kRowsPerGroup) {
      uint32_t words[4];  // this lane's two columns of each piece, bias added
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int h = h0 + (kRowsPerGroup == 2 ? j / 2 : 0), ni = kRowsPerGroup == 2 ? j % 2 : j;
        words[j] = pack_pair<T>(acc[mi][ni][2 * h] + bias[ni][0], acc[mi][ni][2 * h + 1] + bias[ni][1]);
      }
      uint32_t piece[4];  // piece q's 8 columns: word c from lane c of the quad (its columns 2c, 2c + 1)
#pragma unroll
      for (int c = 0; c < 4; ++c) piece[c] = words[c];  // word q is already this lane's; the rounds replace the rest
#pragma unroll
      for (int r = 1; r < 4; ++r) {  // round r: lane q takes from lane q + r the word of piece q, giving it piece q - r
        const int give = (q - r) & 3, from = (q + r) & 3;
        const uint32_t sent = give == 0 ? words[0] : give == 1 ? words[1] : give == 2 ? words[2] : words[3];
        const uint32_t got = __shfl_sync(0xffffffffu, sent, (lane & ~3) | from);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (c == from) piece[c] = got;
        }
      }
      const int h = h0 + (kRowsPerGroup == 2 ? q / 2 : 0), ni = kRowsPerGroup == 2 ? q % 2 : q;
      const int row = m0 + wm * Tr::kWarpTileM + mi * 16 + g + h * 8;
      const int col = n0 + wn * Tr::kWarpTileN + ni * 8;
      if (row >= p.m || col >= p.n) continue;
      T* out = p.d + row * p.ldd + col;
      if (p.vector_store && col + 8 <= p.n) {
        *reinterpret_cast<uint4*>(out) = make_uint4(piece[0], piece[1], piece[2], piece[3]);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          struct alignas(4) Pair { T x, y; } pair;
          memcpy(&pair, &piece[c], 4);
          if (col + 2 * c < p.n) out[2 * c] = pair.x;
          if (col + 2 * c + 1 < p.n) out[2 * c + 1] = pair.y;
        }
      }
    }
  }
}

// Who reduces what: the split CTAs of a tile (cluster ranks 0..splits-1) own its rows round robin (row r belongs to
// rank r % splits, as owned row r / splits), and each CTA's receive buffer holds, for every source (split rank,
// warp group) in that order, its ceil(kTileM / splits) owned rows of kRecvPitch floats.
struct Ownership {
  int splits, rank, rows_per_owner;
};

// Floats of the grid-wide split's workspace slots of one tile: for each owner (split rank) and each source (split
// rank, warp group) that owner's ceil(kTileM / splits) rows of kRecvPitch floats, as a cluster's receive buffers hold
// them.
template <class Tr>
__host__ __device__ constexpr long long grid_tile_floats(int splits, int groups) {
  return static_cast<long long>(splits) * splits * groups * ceil_div(Tr::kTileM, splits) * Tr::kRecvPitch;
}

// Writes this warp group's partial tile into the rows' owners' slots of the grid-wide workspace (`tile_slots`: this
// tile's grid_tile_floats() floats), then meets every CTA of the grid at one barrier: afterwards every source's
// partials are visible to every owner. Every thread of every CTA must call it (the grid barrier).
template <class Tr, int kGroups>
__device__ __forceinline__ void exchange_partials_grid(const float (&acc)[Tr::kMmaM][Tr::kMmaN][4], float* tile_slots,
                                                       const Ownership& own, int wm, int wn, int wk) {
  const int source_floats = own.rows_per_owner * Tr::kRecvPitch;  // a tile's slots fit in 32 bits
  const int owner_floats = source_floats * own.splits * kGroups;
  float* slot = tile_slots + (own.rank * kGroups + wk) * source_floats;
  for_each_pair<Tr>(acc, wm, wn, [&](int r, int c, float v0, float v1) {
    *reinterpret_cast<float2*>(slot + (r % own.splits) * owner_floats + (r / own.splits) * Tr::kRecvPitch + c) =
        make_float2(v0, v1);
  });
  __threadfence();
  cooperative_groups::this_grid().sync();
}

// Writes this warp group's partial tile into the receive buffers of the rows' owners (remote shared memory when
// split over a cluster) and waits until every source's partials have landed. `recv` is this CTA's receive buffer
// (the same offset in every CTA of the cluster).
template <class Tr, int kGroups>
__device__ __forceinline__ void exchange_partials(const float (&acc)[Tr::kMmaM][Tr::kMmaN][4], float* recv,
                                                  const Ownership& own, int wm, int wn, int wk) {
  float* slot = recv + (own.rank * kGroups + wk) * own.rows_per_owner * Tr::kRecvPitch;
  if (own.splits == 1) {
    for_each_pair<Tr>(acc, wm, wn, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(slot + r * Tr::kRecvPitch + c) = make_float2(v0, v1);
    });
    __syncthreads();
    return;
  }
  cluster_wait();  // every CTA of the cluster arrived at kernel start: its shared memory exists
  for_each_pair<Tr>(acc, wm, wn, [&](int r, int c, float v0, float v1) {
    store_cluster_f2(slot + (r / own.splits) * Tr::kRecvPitch + c, static_cast<uint32_t>(r % own.splits), v0, v1);
  });
  cluster_sync();
}

// sum += v, component by component.
__device__ __forceinline__ void add4(float4& sum, const float4& v) {
  sum.x += v.x;
  sum.y += v.y;
  sum.z += v.z;
  sum.w += v.w;
}

// Sums, for each row this CTA owns and each 4-column chunk, the partials of every source in source order (exact
// fp32 adds in a fixed order: deterministic) and stores them with the bias. `recv` is this owner's receive buffer in
// shared memory.
template <class T, class Tr, int kThreads>
__device__ __forceinline__ void reduce_owned_rows(const Params<T>& p, const float* recv, const Ownership& own,
                                                  int sources, int m0, int n0) {
  constexpr int kChunks = Tr::kTileN / 4;
  constexpr int kBatch = 8;  // source loads in flight per thread
  const int valid_rows = min_int(Tr::kTileM, p.m - m0);
  const int my_rows = own.rank < valid_rows ? ceil_div(valid_rows - own.rank, own.splits) : 0;
  const int source_stride = own.rows_per_owner * Tr::kRecvPitch;
  for (int item = threadIdx.x; item < my_rows * kChunks; item += kThreads) {
    const int owned_row = item / kChunks, col = (item % kChunks) * 4;
    const float* src = recv + owned_row * Tr::kRecvPitch + col;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < sources; s0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {  // all loads first, then the adds in source order
        v[j] = s0 + j < sources ? *reinterpret_cast<const float4*>(src + (s0 + j) * source_stride)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (s0 + j < sources) add4(sum, v[j]);
      }
    }
    const int row = m0 + owned_row * own.splits + own.rank;
    store_pair(p, row, n0 + col, sum.x, sum.y);
    store_pair(p, row, n0 + col + 2, sum.z, sum.w);
  }
}

// The grid-wide split's reduction: the same sums from this owner's slots of the workspace (`recv`, written by other
// SMs during this kernel, read past L1), spread over teams of threads so that the 17-64 sources of a chunk are read
// at once rather than one batch after another. A team (a power of two of lanes, within a warp) takes one chunk; lane
// j of it sums sources j, j + team, ... in that order, then the team adds its lanes' sums in a fixed tree: the order
// of every add is fixed by the code (deterministic), not by timing.
template <class T, class Tr, int kThreads>
__device__ __forceinline__ void reduce_owned_rows_grid(const Params<T>& p, const float* recv, const Ownership& own,
                                                       int sources, int m0, int n0) {
  constexpr int kChunks = Tr::kTileN / 4;
  constexpr int kBatch = 4;  // source loads in flight per lane
  const int valid_rows = min_int(Tr::kTileM, p.m - m0);
  const int my_rows = own.rank < valid_rows ? ceil_div(valid_rows - own.rank, own.splits) : 0;
  const int items = my_rows * kChunks, source_stride = own.rows_per_owner * Tr::kRecvPitch;
  int team = 1;  // the CTA's team size: as many lanes per chunk as the threads allow, at most a warp or the sources
  while (team < 32 && team < sources && 2 * team * items <= kThreads) team *= 2;
  const int lane = threadIdx.x % team, teams = kThreads / team;
  for (int first = 0; first < items; first += teams) {  // the same trip count in every thread: shuffles stay whole
    const int item = first + static_cast<int>(threadIdx.x) / team;
    const bool valid = item < items;
    const float* src = recv + (valid ? (item / kChunks) * Tr::kRecvPitch + (item % kChunks) * 4 : 0);
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = lane; s0 < sources; s0 += kBatch * team) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {  // all loads first, then the adds in source order
        const int s = s0 + j * team;
        v[j] = valid && s < sources ? __ldcg(reinterpret_cast<const float4*>(src + s * source_stride))
                                    : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) add4(sum, v[j]);
    }
    for (int offset = team / 2; offset > 0; offset /= 2) {
      sum.x += __shfl_down_sync(0xffffffffu, sum.x, offset, team);
      sum.y += __shfl_down_sync(0xffffffffu, sum.y, offset, team);
      sum.z += __shfl_down_sync(0xffffffffu, sum.z, offset, team);
      sum.w += __shfl_down_sync(0xffffffffu, sum.w, offset, team);
    }
    if (valid && lane == 0) {
      const int owned_row = item / kChunks, col = (item % kChunks) * 4;
      const int row = m0 + owned_row * own.splits + own.rank;
      store_pair(p, row, n0 + col, sum.x, sum.y);
      store_pair(p, row, n0 + col + 2, sum.z, sum.w);
    }
  }
}

// The CTA's work with kGroups K groups of covering warps (kWarpsMN * kGroups warps launched).
template <class T, class Tr, int kGroups>
__device__ __forceinline__ void run_cta(const Params<T>& p, unsigned char* smem_raw) {
  constexpr int kThreads = Tr::kWarpsMN * kGroups * 32;
  T* smem = reinterpret_cast<T*>(smem_raw);
  const bool grid_wide = p.partials != nullptr;
  const bool clustered = p.splits > 1 && !grid_wide;
  if (clustered) cluster_arrive_relaxed();  // its wait, before the first remote store, proves the cluster started
  const int warp = threadIdx.x >> 5, wmn = warp % Tr::kWarpsMN, wk = warp / Tr::kWarpsMN;
  const int wm = wmn / Tr::kWarpsN, wn = wmn % Tr::kWarpsN;
  const int n0 = blockIdx.x * Tr::kTileN, m0 = blockIdx.y * Tr::kTileM;
  const int tile_begin = blockIdx.z * p.tiles_per_split;
  const int num_tiles = min_int(ceil_div(p.k, Tr::kTileK) - tile_begin, p.tiles_per_split);  // >= 1 (host)
  const bool from_registers = kGroups == 1 && p.splits == 1;

  float acc[Tr::kMmaM][Tr::kMmaN][4] = {};
  float bias[Tr::kMmaN][2];
  // Launched with PDL, the CTA may start while the preceding kernel finishes: wait for it before touching memory it
  // may write (inputs, bias, output).
  pdl_wait_prerequisites();
  auto load = [&](int stage, int t) {
    load_tile<T, Tr, kThreads>(p, smem + stage * Tr::kStageElems, m0, n0, tile_begin + t);
  };
  auto compute = [&](int stage) { mma_tile<T, Tr, kGroups>(smem + stage * Tr::kStageElems, acc, wm, wn, wk); };
  if (p.tiles_per_split <= Tr::kStages) {  // the whole K range at once: one round trip, one barrier
#pragma unroll
    for (int t = 0; t < Tr::kStages; ++t) {
      if (t < num_tiles) load(t, t);
    }
    cp_async_commit();
    pdl_launch_dependents();
    if (from_registers) load_bias<T, Tr>(p, bias, n0, wn);
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int t = 0; t < Tr::kStages; ++t) {
      if (t < num_tiles) compute(t);
    }
  } else {
    if (from_registers) load_bias<T, Tr>(p, bias, n0, wn);
    run_cp_async_pipeline<Tr::kStages>(num_tiles, load, compute);
  }
  if (from_registers) {
    store_from_registers<T, Tr>(p, acc, bias, m0, n0, wm, wn);
    return;
  }
  if (grid_wide) {  // split CTAs of a tile: blockIdx.z, their partials in the workspace slots of the tile
    const Ownership own{p.splits, static_cast<int>(blockIdx.z), ceil_div(Tr::kTileM, p.splits)};
    float* tile_slots = p.partials + (blockIdx.y * gridDim.x + blockIdx.x) * grid_tile_floats<Tr>(p.splits, kGroups);
    exchange_partials_grid<Tr, kGroups>(acc, tile_slots, own, wm, wn, wk);
    const int owner_floats = own.rows_per_owner * Tr::kRecvPitch * p.splits * kGroups;
    reduce_owned_rows_grid<T, Tr, kThreads>(p, tile_slots + own.rank * owner_floats, own, p.splits * kGroups, m0, n0);
    return;
  }
  // The receive buffer lies past the stages this launch uses: nothing to wait for before writing it.
  float* recv = reinterpret_cast<float*>(smem_raw + min_int(Tr::kStages, p.tiles_per_split) * Tr::kStageBytes);
  const Ownership own{p.splits, clustered ? static_cast<int>(cluster_rank()) : 0, ceil_div(Tr::kTileM, p.splits)};
  exchange_partials<Tr, kGroups>(acc, recv, own, wm, wn, wk);
  reduce_owned_rows<T, Tr, kThreads>(p, recv, own, p.splits * kGroups, m0, n0);
}

template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads) tiny_gemm_kernel(const Params<T> p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  if (Tr::kWarpsK > 1 && p.warp_groups > 1) {
    run_cta<T, Tr, Tr::kWarpsK>(p, smem_raw);
  } else {
    run_cta<T, Tr, 1>(p, smem_raw);
  }
}

}  // namespace tiny
}  // namespace cudal2

#endif  // CUDAL2_TINY_KERNEL_CUH_
