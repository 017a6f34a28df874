// Compile-time building blocks of the sm80_cute GEMM family: shared-memory layouts, the tiled MMA and the copy
// atoms of one configuration (element type, B layout, CTA tile, warps, stages). Torch-free.
#ifndef CUDAL2_SM80_CUTE_TRAITS_CUH_
#define CUDAL2_SM80_CUTE_TRAITS_CUH_

#include <cute/tensor.hpp>
#include <cutlass/bfloat16.h>
#include <cutlass/half.h>

namespace cudal2::sm80 {

using namespace cute;

// The mma.sync m16n8k16 atom accumulating in fp32 for element type T (half_t or bfloat16_t).
template <class T> struct MmaAtomFor;
template <> struct MmaAtomFor<cutlass::half_t> { using type = SM80_16x8x16_F32F16F16F32_TN; };
template <> struct MmaAtomFor<cutlass::bfloat16_t> { using type = SM80_16x8x16_F32BF16BF16F32_TN; };

// Swizzled shared-memory atom of a K-major operand tile (rows x BK, K contiguous). Every atom row group of
// ldmatrix's 8 rows x 16 bytes lands in 8 distinct 16-byte bank groups: 64-wide rows use an 8x64 atom, 32-wide rows
// a 16x32 atom (two rows per 128-byte line), both under Swizzle<3,3,3>.
template <int BK> struct KMajorSmemAtom;
template <> struct KMajorSmemAtom<64> {
  using type = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
};
template <> struct KMajorSmemAtom<32> {
  using type = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_16, _32>, Stride<_32, _1>>{}));
};

// Swizzled shared-memory atom of an N-major operand tile (64 N-contiguous elements x 8 K), read with ldmatrix.trans.
using NMajorSmemAtom = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_64, _8>, Stride<_1, _64>>{}));

// gmem->smem copy of a K-major tile: 16-byte cp.async per thread, BK/8 threads along K.
template <class T, int kThreads, int BK>
auto make_kmajor_g2s_copy() {
  constexpr int kAlongK = BK / 8;
  return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                         Layout<Shape<Int<kThreads / kAlongK>, Int<kAlongK>>, Stride<Int<kAlongK>, _1>>{},
                         Layout<Shape<_1, _8>>{});
}

// gmem->smem copy of an N-major tile: 16-byte cp.async per thread, 8 threads (64 elements) along N.
template <class T, int kThreads>
auto make_nmajor_g2s_copy() {
  return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                         Layout<Shape<_8, Int<kThreads / 8>>, Stride<_1, _8>>{}, Layout<Shape<_8, _1>>{});
}

// Everything the kernel and the launcher need to know about one configuration.
//   T: cutlass::half_t | cutlass::bfloat16_t. kBNMajor: B is [K, N] row-major (NN); else [N, K] row-major (NT).
//   BM x BN x BK: CTA tile. kWarps: 4 | 8. kStages: cp.async pipeline depth (2..6).
template <class T, bool kBNMajor, int BM_, int BN_, int BK_, int kWarps, int kStages_>
struct GemmTraits {
  using Element = T;
  static constexpr bool kNN = kBNMajor;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarps;
  // Warp grid of the tiled MMA: 2x2 for 4 warps; 8 warps spread along the longer tile side.
  static constexpr int kWarpsM = kWarps == 4 ? 2 : (BN_ >= BM_ ? 2 : 4);
  static constexpr int kWarpsN = kWarps / kWarpsM;

  static_assert(kWarps == 4 || kWarps == 8, "warps must be 4 or 8");
  static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
  static_assert(kStages >= 2 && kStages <= 6, "stages must be 2..6");
  static_assert(BM % (16 * kWarpsM) == 0 && BN % (16 * kWarpsN) == 0, "tile not divisible by the warp layout");
  static_assert(BM % (kThreads / (BK / 8)) == 0 && BN % 64 == 0 && BN % 8 == 0, "tile not divisible by copies");
  static_assert(!kNN || BK % (kThreads / 8) == 0, "BK not divisible by the N-major copy");

  // Each warp covers 16x16 per MMA step (two m16n8k16 atoms along N) so ldmatrix.x4 feeds both operands.
  using TiledMma = decltype(make_tiled_mma(typename MmaAtomFor<T>::type{},
                                           Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>{},
                                           Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>{}));

  using SmemLayoutA = decltype(tile_to_shape(typename KMajorSmemAtom<BK>::type{},
                                             Shape<Int<BM>, Int<BK>, Int<kStages>>{}));
  using SmemLayoutB = conditional_t<kNN,
      decltype(tile_to_shape(NMajorSmemAtom{}, Shape<Int<BN>, Int<BK>, Int<kStages>>{})),
      decltype(tile_to_shape(typename KMajorSmemAtom<BK>::type{}, Shape<Int<BN>, Int<BK>, Int<kStages>>{}))>;
  // Epilogue staging of the output tile in the element type, reusing the pipeline's shared memory.
  using SmemLayoutC = decltype(tile_to_shape(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}),
                                             Shape<Int<BM>, Int<BN>>{}));

  using G2SCopyA = decltype(make_kmajor_g2s_copy<T, kThreads, BK>());
  using G2SCopyB = conditional_t<kNN, decltype(make_nmajor_g2s_copy<T, kThreads>()),
                                 decltype(make_kmajor_g2s_copy<T, kThreads, BK>())>;
  using S2RAtomA = Copy_Atom<SM75_U32x4_LDSM_N, T>;
  using S2RAtomB = conditional_t<kNN, Copy_Atom<SM75_U16x8_LDSM_T, T>, Copy_Atom<SM75_U32x4_LDSM_N, T>>;

  static constexpr size_t kPipelineSmemBytes = (cosize(SmemLayoutA{}) + cosize(SmemLayoutB{})) * sizeof(T);
  static constexpr size_t kEpilogueSmemBytes = cosize(SmemLayoutC{}) * sizeof(T);
  static constexpr size_t kClusterTileBytes = size_t(BM) * BN * sizeof(float);  // fp32 partial tile (cluster split-K)
  static constexpr size_t kSmemBytes = cute::max(cute::max(kPipelineSmemBytes, kEpilogueSmemBytes), kClusterTileBytes);
};

}  // namespace cudal2::sm80

#endif  // CUDAL2_SM80_CUTE_TRAITS_CUH_
