// Device side of the decode GEMM family: D[M, N] = A[M, K] @ op(B) (+ bias) for small M (<= kTileM <= 64).
//
// The GEMM is computed transposed, D^T = W @ A^T, so the weight W (B, [N, K] for NT or [K, N] for NN) is the
// 16-row operand of mma.sync m16n8k16 and the small M is the 8-wide side. Each CTA owns kTileN rows of W and one
// K range (split-K across blockIdx.y). W and A tiles stream through a kStages-deep cp.async pipeline in shared
// memory (padded rows: conflict-free ldmatrix); warps split the CTA tile as kWarpsN x kWarpsK and the kWarpsK
// partial sums are added in a fixed order through shared memory. With several splits, each CTA writes its fp32
// partial tile to the workspace and a second kernel on the same stream sums the partials in split order: results
// are bitwise deterministic, and nothing needs zeroing between calls.
#ifndef CUDAL2_DECODE_KERNEL_CUH_
#define CUDAL2_DECODE_KERNEL_CUH_

#include "cudal2/decode_ptx.cuh"

namespace cudal2 {
namespace decode {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }

// Compile-time shape of one instantiation; shared by the kernel and its host launcher.
template <bool kNT_, int kTileM_, int kTileN_, int kTileK_, int kStages_, int kWarps_>
struct Traits {
  static constexpr bool kNT = kNT_;
  static constexpr int kTileM = kTileM_, kTileN = kTileN_, kTileK = kTileK_, kStages = kStages_;
  static constexpr int kWarps = kWarps_, kThreads = kWarps * 32;
  static constexpr int kWarpsN = min_int(kWarps, kTileN / 16);  // warps side by side along N
  static constexpr int kWarpsK = kWarps / kWarpsN;               // warps splitting each K tile
  static constexpr int kRowTiles = kTileN / 16 / kWarpsN;        // 16-row mma tiles per warp
  static constexpr int kMTiles = kTileM / 8;                     // 8-wide mma tiles along M
  static constexpr int kKSteps = kTileK / 16;                    // k16 steps per K tile
  // Shared-memory tiles: W as [kTileN][kTileK] (NT) or [kTileK][kTileN] (NN), A as [kTileM][kTileK]; each row
  // padded by 16 bytes so that the 8 row addresses of an ldmatrix hit distinct bank groups.
  static constexpr int kWRows = kNT ? kTileN : kTileK;
  static constexpr int kWCols = kNT ? kTileK : kTileN;
  static constexpr int kWPitch = kWCols + 8;
  static constexpr int kXPitch = kTileK + 8;
  static constexpr int kStageElems = kWRows * kWPitch + kTileM * kXPitch;
  static constexpr int kPipeBytes = kStages * kStageElems * 2;
  static constexpr int kReduceBytes = (kWarpsK - 1) * kTileN * kTileM * 4;  // cross-warp scratch, after the pipe
  static constexpr int kSmemBytes = kPipeBytes + kReduceBytes;
  // Resident CTAs per SM on sm_90 (227 KiB of shared memory, 2048 threads): used to size the automatic split-K.
  static constexpr int kCtasPerSm = max_int(1, min_int(232448 / (kSmemBytes + 1024), 2048 / kThreads));

  static_assert(kTileM % 8 == 0 && kTileM >= 8 && kTileM <= 64, "tile_m must be 8, 16, ..., 64");
  static_assert(kTileN % 16 == 0 && kTileK % 16 == 0, "tile_n and tile_k must be multiples of 16");
  static_assert(kWarps % kWarpsN == 0 && (kTileN / 16) % kWarpsN == 0, "warps must divide or be a multiple of tile_n/16");
  static_assert(kKSteps % kWarpsK == 0, "warps along K must divide tile_k/16");
  static_assert(kStages >= 2, "the pipeline needs at least 2 stages");
};

// Which units (kTileN x kTileK blocks of W, numbered n-tile-major: unit u = n tile u / k_tiles, K tile
// u % k_tiles) each of the `ctas` CTAs accumulates. Split-K (splits >= 1): CTA c = n_tile * splits + part takes the
// part-th run of tiles_per_split K tiles of its n tile. Stream-K (splits == 0): CTA c takes units
// [c * U / ctas, (c + 1) * U / ctas) of all U units, so that every CTA of one resident wave gets the same work
// (within one unit) whatever the tile counts; a CTA may then start or end inside an n tile and cover several.
struct Schedule {
  int n_tiles, k_tiles, ctas, splits, tiles_per_split;  // n_tiles * k_tiles < 2^31 (can_implement)

  __host__ __device__ int units() const { return n_tiles * k_tiles; }
  __host__ __device__ int begin(int c) const {
    if (splits == 0) return static_cast<int>(static_cast<long long>(c) * units() / ctas);
    return c / splits * k_tiles + c % splits * tiles_per_split;
  }
  __host__ __device__ int end(int c) const {
    if (splits == 0) return static_cast<int>((c + 1LL) * units() / ctas);
    return c / splits * k_tiles + min_int(k_tiles, (c % splits + 1) * tiles_per_split);
  }
  // The CTA whose range holds unit u (stream-K: the largest c with begin(c) <= u; ctas <= units()).
  __host__ __device__ int cta_of(int u) const {
    if (splits == 0) return static_cast<int>(((u + 1LL) * ctas - 1) / units());
    return u / k_tiles * splits + u % k_tiles / tiles_per_split;
  }
  // Partial-tile slots per CTA in the workspace: a stream-K CTA may leave partials of its first and last n tile.
  __host__ __device__ int slots() const { return splits == 0 ? 2 : 1; }
};

// Runtime arguments of one launch.
template <class T>
struct Params {
  const T* a;       // [M, K], row stride lda
  const T* b;       // NT: [N, K] (ldb); NN: [K, N] (ldb)
  T* d;             // [M, N], row stride ldd
  const T* bias;    // [N] or nullptr
  float* partials;  // [ctas][slots][M][kTileN] fp32 workspace (when some n tile is shared)
  int m, n, k;
  long long lda, ldb, ldd;
  Schedule sched;

  // Element (row, column j) of CTA c's partial tile in `slot` (0: the CTA's first n tile, 1: its last).
  __device__ float* partial(int c, int slot, int row, int j, int tile_n) const {
    return partials + ((static_cast<long long>(c) * sched.slots() + slot) * m + row) * tile_n + j;
  }
};

// Issues the cp.async copies of the unit (n_tile, k_tile) (its W block and A columns) into stage buffer `stage_smem`.
template <class T, class Tr>
__device__ __forceinline__ void load_tile(const Params<T>& p, T* stage_smem, int n_tile, int k_tile, int x_rows) {
  const int n0 = n_tile * Tr::kTileN, k0 = k_tile * Tr::kTileK;
  constexpr int kWChunkCols = Tr::kWCols / 8, kWChunks = Tr::kWRows * kWChunkCols;
#pragma unroll
  for (int i = 0; i < ceil_div(kWChunks, Tr::kThreads); ++i) {
    const int c = threadIdx.x + i * Tr::kThreads;
    if (kWChunks % Tr::kThreads == 0 || c < kWChunks) {
      const int r = c / kWChunkCols, col = (c % kWChunkCols) * 8;
      const int gr = Tr::kNT ? n0 + r : k0 + r, gc = Tr::kNT ? k0 + col : n0 + col;
      const bool ok = Tr::kNT ? (gr < p.n && gc < p.k) : (gr < p.k && gc < p.n);
      const T* src = ok ? p.b + gr * p.ldb + gc : p.b;
      cp_async_16(smem_addr(stage_smem + r * Tr::kWPitch + col), src, ok);
    }
  }
  T* x_smem = stage_smem + Tr::kWRows * Tr::kWPitch;
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
      ldmatrix_x4(f.a[rt], smem_addr(stage_smem + r * Tr::kWPitch + c));
    } else {  // W stored [k][n]: transposed loads give the same fragments
      const int r = ks + (lane & 7) + (lane >> 4) * 8, c = row0 + ((lane >> 3) & 1) * 8;
      ldmatrix_x4_trans(f.a[rt], smem_addr(stage_smem + r * Tr::kWPitch + c));
    }
  }
  const T* x_smem = stage_smem + Tr::kWRows * Tr::kWPitch;
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
  if (Tr::kWarpsK == 1) return;
  const int lane = threadIdx.x & 31;
  constexpr int kPerWarp = Tr::kRowTiles * Tr::kMTiles * 4;
  auto slot = [&](int w, int i) { return ((w * Tr::kWarpsN + wn) * kPerWarp + i) * 32 + lane; };
  if (wk > 0) {
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) scratch[slot(wk - 1, i)] = (&acc[0][0][0])[i];
  }
  __syncthreads();
  if (wk == 0) {
    for (int w = 0; w < Tr::kWarpsK - 1; ++w) {
#pragma unroll
      for (int i = 0; i < kPerWarp; ++i) (&acc[0][0][0])[i] += scratch[slot(w, i)];
    }
  }
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

// Writes d[m * ldd + n] = value + bias[n] in the element type.
template <class T>
__device__ __forceinline__ void store_output(T* d, long long ldd, const T* bias, int m, int n, float value) {
  if (bias != nullptr) value += to_float(bias[n]);
  d[m * ldd + n] = from_float<T>(value);
}

// A position in the unit list as (n tile, K tile), stepped without divisions.
struct UnitCursor {
  int n_tile, k_tile;
  __device__ void advance(int k_tiles) {
    if (++k_tile == k_tiles) {
      k_tile = 0;
      ++n_tile;
    }
  }
};

// Stores this CTA's sums over its units of n tile t: directly (+ bias) when the CTA covered all of the tile's units
// (then no other CTA has any), else as the CTA's partial tile (slot 0 for its first tile, 1 for its last) in the
// workspace. Warps with wk > 0 have handed their sums to wk == 0 already.
template <class T, class Tr>
__device__ __forceinline__ void store_tile(const Params<T>& p, const float (&acc)[Tr::kRowTiles][Tr::kMTiles][4],
                                           int t, int first, int end, int wn) {
  const int n0 = t * Tr::kTileN;
  if (first <= t * p.sched.k_tiles && (t + 1) * p.sched.k_tiles <= end) {
    // An opaque copy of ldd: keeps the compiler from hoisting the output offsets (registers) out of the main loop.
    long long ldd = p.ldd;
    asm volatile("" : "+l"(ldd));
    for_each_output<Tr>(acc, p.m, p.n, n0, wn, [&](int m, int n, float v) { store_output(p.d, ldd, p.bias, m, n, v); });
  } else {
    const int slot = first / p.sched.k_tiles == t ? 0 : 1;
    for_each_output<Tr>(acc, p.m, p.n, n0, wn,
                        [&](int m, int n, float v) { *p.partial(blockIdx.x, slot, m, n - n0, Tr::kTileN) = v; });
  }
}

template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads) decode_gemm_kernel(const Params<T> p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  float* scratch = reinterpret_cast<float*>(smem_raw + Tr::kPipeBytes);
  const int warp = threadIdx.x >> 5, wn = warp % Tr::kWarpsN, wk = warp / Tr::kWarpsN;
  const int first = p.sched.begin(blockIdx.x), end = p.sched.end(blockIdx.x);
  const int num_units = end - first;  // >= 1 (host)
  const int k_tiles = p.sched.k_tiles;
  const int m_tiles = ceil_div(p.m, 8);

  float acc[Tr::kRowTiles][Tr::kMTiles][4] = {};
  UnitCursor load{first / k_tiles, first % k_tiles};
#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    if (s < num_units) {
      load_tile<T, Tr>(p, smem + s * Tr::kStageElems, load.n_tile, load.k_tile, m_tiles * 8);
      load.advance(k_tiles);
    }
    cp_async_commit();
  }
  pdl_launch_dependents();  // the split-K reduction may get scheduled (it waits for this grid to finish)
  int n_tile = first / k_tiles, k_tile = first % k_tiles;
  for (int i = 0; i < num_units;) {  // one n tile per pass: its units in this CTA, then its store
    for (const int stop = min_int(num_units, i + k_tiles - k_tile); i < stop; ++i) {
      cp_async_wait<Tr::kStages - 2>();
      __syncthreads();  // unit i landed for every thread; stage (i - 1) % kStages and the scratch are free again
      const int next = i + Tr::kStages - 1;
      if (next < num_units) {
        load_tile<T, Tr>(p, smem + (next % Tr::kStages) * Tr::kStageElems, load.n_tile, load.k_tile, m_tiles * 8);
        load.advance(k_tiles);
      }
      cp_async_commit();
      mma_tile<T, Tr>(smem + (i % Tr::kStages) * Tr::kStageElems, acc, wn, wk, m_tiles);
    }
    reduce_warps_k<Tr>(acc, scratch, wn, wk);
    if (wk == 0) store_tile<T, Tr>(p, acc, n_tile, first, end, wn);
#pragma unroll
    for (int j = 0; j < Tr::kRowTiles * Tr::kMTiles * 4; ++j) (&acc[0][0][0])[j] = 0.f;
    ++n_tile;
    k_tile = 0;
  }
  cp_async_wait<0>();
}

// Epilogue of shared n tiles: out[m][n] = the sum over the CTAs covering n's tile, in CTA order, of their partials
// (+ bias); one thread per output, outputs of unshared tiles are skipped (the GEMM wrote them).
template <class T, class Tr>
__global__ void __launch_bounds__(256) decode_splitk_reduce_kernel(const Params<T> p) {
  pdl_wait_prerequisites();  // launched early (programmatic dependent launch) on sm_90
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(p.m) * p.n) return;
  const int m = static_cast<int>(idx / p.n), n = static_cast<int>(idx % p.n), t = n / Tr::kTileN;
  const int c_first = p.sched.cta_of(t * p.sched.k_tiles), c_last = p.sched.cta_of((t + 1) * p.sched.k_tiles - 1);
  if (c_first == c_last) return;  // not shared
  // c_first holds tile t in slot 1 if it began in an earlier tile; every later CTA begins inside tile t (slot 0), so
  // their partials are evenly strided and the loads can all be in flight at once.
  const int j = n - t * Tr::kTileN;
  float sum = __ldcg(p.partial(c_first, p.sched.begin(c_first) < t * p.sched.k_tiles ? 1 : 0, m, j, Tr::kTileN));
  const float* rest = p.partial(c_first + 1, 0, m, j, Tr::kTileN);
  const long long stride = static_cast<long long>(p.sched.slots()) * p.m * Tr::kTileN;
#pragma unroll 8
  for (int c = 0; c < c_last - c_first; ++c) sum += __ldcg(rest + c * stride);
  store_output(p.d, p.ldd, p.bias, m, n, sum);
}

}  // namespace decode
}  // namespace cudal2

#endif  // CUDAL2_DECODE_KERNEL_CUH_
