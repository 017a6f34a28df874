// Device code of the sm80_cute GEMM family: a CuTe multistage mainloop (16-byte cp.async into swizzled shared
// memory, ldmatrix, mma.sync m16n8k16 with fp32 accumulation, register-pipelined fragments) and an epilogue staged
// through shared memory (fused bias, 128-bit stores) or stored from registers; with split-K, the fp32 partials are
// reduced in a thread-block cluster (cluster_splitk.cuh, sm_90) or written to the caller's workspace. The code-level
// choices (register pipeline, prefetch depth, staggered A/B copies, epilogue) are GemmTraits parameters.
// Residues in M, N and K are handled by zero-filling cp.async and predicated stores. Torch-free.
#ifndef CUDAL2_SM80_CUTE_KERNEL_CUH_
#define CUDAL2_SM80_CUTE_KERNEL_CUH_

#include <cstdint>

#include "cudal2/cluster_splitk.cuh"
#include "cudal2/pdl.cuh"
#include "cudal2/sm80_cute_traits.cuh"

namespace cudal2::sm80 {

// Runtime arguments of one launch (built by the host launcher from a cudal2_problem).
template <class T>
struct GemmParams {
  const T* a;          // [M, K], row stride lda
  const T* b;          // NN: [K, N] row stride ldb; NT: [N, K] row stride ldb
  T* d;                // [M, N], row stride ldd (unused when splitting K)
  const T* bias;       // [N] or nullptr (applied by the split-K reduction when splitting K)
  float* partials;     // workspace split-K: [splits][tiles_m*BM][partials_ld] fp32; nullptr otherwise
  int64_t lda, ldb, ldd;
  int m, n, k;
  int tiles_m, tiles_n;
  int k_tiles_per_split;  // BK-wide K tiles each blockIdx.z handles
  int splits;             // gridDim.z; > 1 reduces fp32 partials (in the cluster or through the workspace)
  bool cluster_reduce;    // the splits of a tile form a cluster along z and reduce in distributed shared memory
  int partials_ld;        // tiles_n*BN
  int group;              // threadblock swizzle: CTAs walk `group` tiles along the raster dimension, 0 = all
  int raster_n;           // 1: consecutive CTAs walk along N (share A tiles); 0: along M (share B tiles)
};

// Maps the linear CTA index to its output tile. Consecutive CTAs walk `group` tiles along the raster dimension
// and then step along the other one, so a group shares operand tiles in L2 (grouped ordering).
__device__ inline void tile_coords(int bid, int tiles_m, int tiles_n, int group, bool raster_n, int& tm, int& tn) {
  const int major = raster_n ? tiles_n : tiles_m;
  const int minor = raster_n ? tiles_m : tiles_n;
  const int g = (group <= 0 || group > major) ? major : group;
  const int per_group = g * minor;
  const int first = (bid / per_group) * g;
  const int rows = min(major - first, g);
  const int within = bid % per_group;
  const int i_major = first + within % rows;
  const int i_minor = within / rows;
  tm = raster_n ? i_minor : i_major;
  tn = raster_n ? i_major : i_minor;
}

// 16-byte cp.async that reads `src_bytes` (0..16) and zero-fills the rest of the destination.
__device__ inline void cp_async_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = cast_smem_ptr_to_uint(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}

// Copies one operand tile with bounds: each 8-element vector (contiguous along mode kContig of the tile) reads only
// the elements inside rem = (rows, cols) remaining and zero-fills the rest. `base` is any valid global address.
template <int kContig, class T, class SrcTensor, class DstTensor, class CoordTensor>
__device__ inline void copy_tile_residue(const SrcTensor& src, DstTensor& dst, const CoordTensor& coord, int rem0,
                                         int rem1, const T* base) {
  CUTE_UNROLL
  for (int i = 0; i < size<1>(src); ++i) {
    CUTE_UNROLL
    for (int j = 0; j < size<2>(src); ++j) {
      const auto c = coord(0, i, j);
      const int contig = kContig == 0 ? get<0>(c) : get<1>(c);
      const int other = kContig == 0 ? get<1>(c) : get<0>(c);
      const int contig_rem = kContig == 0 ? rem0 : rem1;
      const int other_rem = kContig == 0 ? rem1 : rem0;
      const int valid = other < other_rem ? max(0, min(8, contig_rem - contig)) : 0;
      const T* from = valid > 0 ? &src(0, i, j) : base;
      cp_async_zfill(&dst(0, i, j), from, valid * int(sizeof(T)));
    }
  }
}

// Sums the cluster's fp32 partial tiles (cluster_reduce_tile) of the output tile at (m0, n0) and stores them with
// bias as T into d [m, n]. Kept out of line (scalar arguments: no local copy of the launch parameters) so that the
// mainloop's register allocation does not have to accommodate it.
template <class Tr, class T>
__device__ __noinline__ void store_cluster_reduced(const float* tile, T* d, const T* bias, int64_t ldd, int m, int n,
                                                   int splits, int m0, int n0) {
  constexpr int BM = Tr::BM, BN = Tr::BN;
  cluster_reduce_tile<BN>(tile, min(BM, m - m0), splits, [&](int r, int c, float4 sum) {
    const int gn = n0 + c;
    if (gn >= n) return;
    const float v[4] = {sum.x, sum.y, sum.z, sum.w};
    alignas(8) T out[4];
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {
      const float b = (bias != nullptr && gn + j < n) ? static_cast<float>(bias[gn + j]) : 0.f;
      out[j] = static_cast<T>(v[j] + b);
    }
    T* dst = d + int64_t(m0 + r) * ldd + gn;
    if (gn + 4 <= n) {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(out);
    } else {
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) {
        if (gn + j < n) dst[j] = out[j];
      }
    }
  });
}

// The direct epilogue: bias in fp32, rounded once to T; each pair of adjacent columns a thread holds (values 2h, 2h+1
// of an m16n8 accumulator atom, SM80_16x8_Row) is one 32-bit store. `coords`: each value's (row, column) in the tile.
template <class T, class Acc, class Coords>
__device__ inline void store_from_registers(const Acc& acc, const Coords& coords, T* d, const T* bias, int64_t ldd,
                                            int m, int n, int m0, int n0) {
  static_assert(decltype(size<0>(acc))::value == 4, "expected the 4 fp32 values of an m16n8 accumulator atom");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int gm = m0 + get<0>(coords(i)), gn = n0 + get<1>(coords(i));
    if (gm >= m || gn >= n) continue;
    float v0 = acc(i), v1 = acc(i + 1);
    if (bias != nullptr) {
      v0 += static_cast<float>(bias[gn]);
      if (gn + 1 < n) v1 += static_cast<float>(bias[gn + 1]);
    }
    T* dst = d + int64_t(gm) * ldd + gn;
    if (gn + 1 < n) {
      alignas(4) T pair[2] = {static_cast<T>(v0), static_cast<T>(v1)};
      *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(pair);
    } else {
      dst[0] = static_cast<T>(v0);
    }
  }
}

// One CTA computes a BM x BN output tile over its split's K range.
template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) gemm_kernel(const GemmParams<typename Tr::Element> p) {
  using T = typename Tr::Element;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, kStages = Tr::kStages;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x;

  int tm, tn;
  tile_coords(blockIdx.x, p.tiles_m, p.tiles_n, p.group, p.raster_n != 0, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int total_k_tiles = (p.k + BK - 1) / BK;
  const int kt_begin = blockIdx.z * p.k_tiles_per_split;
  const int kt_end = min(kt_begin + p.k_tiles_per_split, total_k_tiles);
  const int n_tiles = kt_end - kt_begin;
  const int k_end = min(p.k, kt_end * BK);

  T* smem_a = reinterpret_cast<T*>(smem);
  T* smem_b = smem_a + cosize(typename Tr::SmemLayoutA{});
  Tensor sA = make_tensor(make_smem_ptr(smem_a), typename Tr::SmemLayoutA{});  // (BM, BK, PIPE)
  Tensor sB = make_tensor(make_smem_ptr(smem_b), typename Tr::SmemLayoutB{});  // (BN, BK, PIPE)

  // gmem -> smem copies, and each thread's tile coordinates for residue predicates.
  typename Tr::G2SCopyA g2s_a;
  typename Tr::G2SCopyB g2s_b;
  auto g2s_thr_a = g2s_a.get_slice(tid);
  auto g2s_thr_b = g2s_b.get_slice(tid);
  const Tensor tAcA = g2s_thr_a.partition_S(make_identity_tensor(Shape<Int<BM>, Int<BK>>{}));
  const Tensor tBcB = g2s_thr_b.partition_S(make_identity_tensor(Shape<Int<BN>, Int<BK>>{}));
  const int m_rem = p.m - m0, n_rem = p.n - n0;
  const bool mn_interior = m_rem >= BM && n_rem >= BN;

  // cp.async copies of K tile `kt` into `stage`: A's when kPart & kLoadA, B's when kPart & kLoadB.
  constexpr int kLoadA = 1, kLoadB = 2;
  auto load_k_tile = [&](int kt, int stage, auto part) {
    constexpr int kPart = decltype(part)::value;
    const int k0 = kt * BK;
    const Tensor gA = make_tensor(make_gmem_ptr(p.a + int64_t(m0) * p.lda + k0), Shape<Int<BM>, Int<BK>>{},
                                  make_stride(p.lda, _1{}));
    const Tensor gB = [&] {
      if constexpr (Tr::kNN) {
        return make_tensor(make_gmem_ptr(p.b + int64_t(k0) * p.ldb + n0), Shape<Int<BN>, Int<BK>>{},
                           make_stride(_1{}, p.ldb));
      } else {
        return make_tensor(make_gmem_ptr(p.b + int64_t(n0) * p.ldb + k0), Shape<Int<BN>, Int<BK>>{},
                           make_stride(p.ldb, _1{}));
      }
    }();
    const Tensor tAgA = g2s_thr_a.partition_S(gA);
    const Tensor tBgB = g2s_thr_b.partition_S(gB);
    Tensor tAsA = g2s_thr_a.partition_D(sA(_, _, stage));
    Tensor tBsB = g2s_thr_b.partition_D(sB(_, _, stage));
    const int k_rem = k_end - k0;
    if (mn_interior && k_rem >= BK) {
      if constexpr ((kPart & kLoadA) != 0) copy(g2s_a, tAgA, tAsA);
      if constexpr ((kPart & kLoadB) != 0) copy(g2s_b, tBgB, tBsB);
    } else {
      if constexpr ((kPart & kLoadA) != 0) copy_tile_residue<1>(tAgA, tAsA, tAcA, m_rem, k_rem, p.a);
      if constexpr ((kPart & kLoadB) != 0) copy_tile_residue<Tr::kNN ? 0 : 1>(tBgB, tBsB, tBcB, n_rem, k_rem, p.b);
    }
  };
  constexpr auto kTileA = Int<Tr::kStaggerAB ? kLoadA : kLoadA | kLoadB>{};  // at k-block 0
  constexpr auto kTileB = Int<kLoadB>{};                                       // at k-block 1 when staggered

  // Fragments and smem -> register (ldmatrix) copies.
  typename Tr::TiledMma mma;
  auto thr_mma = mma.get_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
  clear(acc);

  auto s2r_a = make_tiled_copy_A(typename Tr::S2RAtomA{}, mma);
  auto s2r_b = make_tiled_copy_B(typename Tr::S2RAtomB{}, mma);
  auto s2r_thr_a = s2r_a.get_slice(tid);
  auto s2r_thr_b = s2r_b.get_slice(tid);
  const Tensor tXsA = s2r_thr_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, PIPE)
  const Tensor tXsB = s2r_thr_b.partition_S(sB);
  Tensor tXrA = s2r_thr_a.retile_D(tCrA);
  Tensor tXrB = s2r_thr_b.retile_D(tCrB);
  constexpr int kBlocks = size<2>(tCrA);

  // Register pipeline: k-block kb + kRegAhead is loaded (ldmatrix) during the MMAs of k-block kb.
  constexpr int kRegAhead = Tr::kRegPipeline - 1;
  constexpr int kPrefetch = Tr::kPrefetch;
  static_assert(kRegAhead < kBlocks, "the register pipeline must be shorter than a K tile's k-blocks");

  // Prologue: fill kPrefetch stages (empty commit groups keep the wait counts uniform).
  int kt_next = kt_begin;
  CUTE_UNROLL
  for (int s = 0; s < kPrefetch; ++s) {
    if (kt_next < kt_end) load_k_tile(kt_next, s, Int<kLoadA | kLoadB>{});
    ++kt_next;
    cp_async_fence();
  }
  pdl_launch_dependents();  // the split-K reduction may get scheduled (it waits for this grid to finish)
  int read_stage = 0, write_stage = kPrefetch;
  cp_async_wait<kPrefetch - 1>();
  __syncthreads();
  CUTE_UNROLL
  for (int kb = 0; kb < kRegAhead; ++kb) {
    copy(s2r_a, tXsA(_, _, kb, read_stage), tXrA(_, _, kb));
    copy(s2r_b, tXsB(_, _, kb, read_stage), tXrB(_, _, kb));
  }

  // The next tile's stage: wait for its copies (kPrefetch-1 younger groups stay in flight), make them visible.
  auto next_read_stage = [&]() {
    read_stage = (read_stage == kStages - 1) ? 0 : read_stage + 1;
    cp_async_wait<kPrefetch - 1>();
    __syncthreads();
    return read_stage;
  };
  // Closes the cp.async group of the tile kPrefetch ahead; the next write stage was read kStages - kPrefetch tiles
  // earlier, before the last next_read_stage barrier.
  auto commit_tile = [&]() {
    ++kt_next;
    cp_async_fence();
    if constexpr (kPrefetch == kStages - 1) {
      write_stage = read_stage;
    } else {
      write_stage = (write_stage == kStages - 1) ? 0 : write_stage + 1;
    }
  };

  // Mainloop: while computing k-block kb, load k-block kb+kRegAhead into registers; at kb == 0 issue the cp.async
  // of the tile kPrefetch ahead (B's at kb == 1 when staggered).
  for (int t = 0; t < n_tiles; ++t) {
    int stage = read_stage;
    CUTE_UNROLL
    for (int kb = 0; kb < kBlocks; ++kb) {
      if constexpr (Tr::kStaggerAB) {
        if (kb == 1) {  // before the stage switch: its wait counts this group
          if (kt_next < kt_end) load_k_tile(kt_next, write_stage, kTileB);
          commit_tile();
        }
      }
      if (kRegAhead > 0 && kb == kBlocks - kRegAhead) stage = next_read_stage();
      const int kb_load = (kb + kRegAhead) % kBlocks;
      copy(s2r_a, tXsA(_, _, kb_load, stage), tXrA(_, _, kb_load));
      copy(s2r_b, tXsB(_, _, kb_load, stage), tXrB(_, _, kb_load));
      if (kb == 0) {
        if (kt_next < kt_end) load_k_tile(kt_next, write_stage, kTileA);
        if constexpr (!Tr::kStaggerAB) commit_tile();
      }
      gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), acc);
    }
    if constexpr (kRegAhead == 0) next_read_stage();
  }
  cp_async_wait<0>();

  if (p.cluster_reduce) {
    __syncthreads();  // every warp is done reading the pipeline's shared memory
    float* tile = reinterpret_cast<float*>(smem);
    Tensor tCsW = thr_mma.partition_C(make_tensor(make_smem_ptr(tile), Shape<Int<BM>, Int<BN>>{}, LayoutRight{}));
    copy(acc, tCsW);
    store_cluster_reduced<Tr>(tile, p.d, p.bias, p.ldd, p.m, p.n, p.splits, m0, n0);
    return;
  }
  if (p.splits > 1) {
    // fp32 partial tile (tile-padded, so no predicates) for the deterministic split-K reduction.
    const Tensor gW = make_tensor(
        make_gmem_ptr(p.partials + (int64_t(blockIdx.z) * p.tiles_m * BM + m0) * p.partials_ld + n0),
        Shape<Int<BM>, Int<BN>>{}, make_stride(int64_t(p.partials_ld), _1{}));
    Tensor tCgW = thr_mma.partition_C(gW);
    copy(acc, tCgW);
    return;
  }

  const Tensor tCcC = thr_mma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
  if constexpr (Tr::kEpilogue == Epilogue::kDirect) {
    store_from_registers(acc, tCcC, p.d, p.bias, p.ldd, p.m, p.n, m0, n0);
    return;
  }
  // Epilogue: bias in fp32, round once to T, stage through swizzled smem, then 128-bit predicated stores.
  __syncthreads();  // every warp is done reading the pipeline's shared memory
  Tensor sC = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem)), typename Tr::SmemLayoutC{});
  Tensor tCsC = thr_mma.partition_C(sC);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) {
    float v = acc(i);
    if (p.bias != nullptr) {
      const int n = n0 + get<1>(tCcC(i));
      if (n < p.n) v += static_cast<float>(p.bias[n]);
    }
    tCsC(i) = static_cast<T>(v);
  }
  __syncthreads();
  constexpr int kChunksPerRow = BN / 8;
  CUTE_UNROLL
  for (int idx = tid; idx < BM * kChunksPerRow; idx += Tr::kThreads) {
    const int r = idx / kChunksPerRow, c = (idx % kChunksPerRow) * 8;
    const int gm = m0 + r, gn = n0 + c;
    if (gm >= p.m || gn >= p.n) continue;
    T* dst = p.d + int64_t(gm) * p.ldd + gn;
    if (gn + 8 <= p.n) {
      *reinterpret_cast<uint128_t*>(dst) = *reinterpret_cast<const uint128_t*>(&sC(r, c));
    } else {
      for (int j = 0; j < p.n - gn; ++j) dst[j] = sC(r, c + j);  // 8-element chunks never cross a swizzle unit
    }
  }
}

}  // namespace cudal2::sm80

#endif  // CUDAL2_SM80_CUTE_KERNEL_CUH_
