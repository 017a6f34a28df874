// Compile-time building blocks of the sm80_cute GEMM family: shared-memory layouts, the tiled MMA and the copy
// atoms of one configuration (element type, B layout, CTA tile, warps, stages, code-level choices). Torch-free.
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

// Width in elements of the swizzled atoms along a tile's N side (the widest of 64, 32 and 16 dividing BN), and the
// swizzle of such an atom: 8 consecutive rows (ldmatrix's 8 x 16 bytes, or the 8-row epilogue atom) land in 8
// distinct 16-byte bank groups.
template <int BN> constexpr int kNAtomWidth = BN % 64 == 0 ? 64 : BN % 32 == 0 ? 32 : 16;
template <int kWidth> using NSwizzle = Swizzle<kWidth == 64 ? 3 : kWidth == 32 ? 2 : 1, 3, 3>;

// Swizzled shared-memory atom of an N-major operand tile (kNAtomWidth N-contiguous elements x 8 K), read with
// ldmatrix.trans.
template <int BN>
using NMajorSmemAtom = decltype(composition(
    NSwizzle<kNAtomWidth<BN>>{}, Layout<Shape<Int<kNAtomWidth<BN>>, _8>, Stride<_1, Int<kNAtomWidth<BN>>>>{}));

// Swizzled shared-memory atom of the output tile staged by the epilogue (8 rows x kNAtomWidth columns).
template <int BN>
using OutputSmemAtom = decltype(composition(
    NSwizzle<kNAtomWidth<BN>>{}, Layout<Shape<_8, Int<kNAtomWidth<BN>>>, Stride<Int<kNAtomWidth<BN>>, _1>>{}));

// gmem->smem copy of a K-major tile: 16-byte cp.async per thread, BK/8 threads along K.
template <class T, int kThreads, int BK>
auto make_kmajor_g2s_copy() {
  constexpr int kAlongK = BK / 8;
  return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                         Layout<Shape<Int<kThreads / kAlongK>, Int<kAlongK>>, Stride<Int<kAlongK>, _1>>{},
                         Layout<Shape<_1, _8>>{});
}

// gmem->smem copy of an N-major tile: 16-byte cp.async per thread, one atom width (kNAtomWidth elements) along N.
template <class T, int kThreads, int BN>
auto make_nmajor_g2s_copy() {
  constexpr int kAlongN = kNAtomWidth<BN> / 8;
  return make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
                         Layout<Shape<Int<kAlongN>, Int<kThreads / kAlongN>>, Stride<_1, Int<kAlongN>>>{},
                         Layout<Shape<_8, _1>>{});
}

// How the epilogue stores the output tile: staged through swizzled shared memory and written with 128-bit stores,
// or straight from the accumulator registers (32-bit stores of the column pairs each thread holds).
enum class Epilogue { kSmem, kDirect };

// Everything the kernel and the launcher need to know about one configuration.
//   T: cutlass::half_t | cutlass::bfloat16_t. kBNMajor: B is [K, N] row-major (NN); else [N, K] row-major (NT).
//   BM x BN x BK: CTA tile (BN a multiple of 16). kWarps: 1 | 2 | 4 | 8. kStages: shared-memory stages (2..6).
// Code-level parameters (their defaults are the family's original code):
//   kRegPipeline: k-blocks of ldmatrix fragments in registers at once (1: load k-block i, then its MMAs; 2: load
//   i+1 during the MMAs of i; 3: i+2), at most BK/16. kPrefetch: K tiles cp.async runs ahead (1..kStages-1).
//   kStaggerAB: a tile's B copies are issued one k-block after its A copies (between the MMAs). kEpilogue: see
//   Epilogue.
template <class T, bool kBNMajor, int BM_, int BN_, int BK_, int kWarps, int kStages_, int kRegPipeline_ = 2,
          int kPrefetch_ = kStages_ - 1, bool kStaggerAB_ = false, Epilogue kEpilogue_ = Epilogue::kSmem>
struct GemmTraits {
  using Element = T;
  static constexpr bool kNN = kBNMajor;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_;
  static constexpr int kRegPipeline = kRegPipeline_, kPrefetch = kPrefetch_;
  static constexpr bool kStaggerAB = kStaggerAB_;
  static constexpr Epilogue kEpilogue = kEpilogue_;
  static constexpr int kThreads = 32 * kWarps;
  // Warp grid of the tiled MMA: 2x2 for 4 warps; 2 and 8 warps spread along the longer tile side.
  static constexpr int kWarpsM = kWarps == 1 ? 1 : kWarps == 2 ? (BN_ >= BM_ ? 1 : 2) : kWarps == 4 ? 2
                                                                                   : (BN_ >= BM_ ? 2 : 4);
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kCopyRowsK = kThreads / (BK / 8);            // rows per pass of the K-major copy
  static constexpr int kCopyRowsN = kThreads / (kNAtomWidth<BN> / 8);  // K rows per pass of the N-major copy

  static_assert(kWarps == 1 || kWarps == 2 || kWarps == 4 || kWarps == 8, "warps must be 1, 2, 4 or 8");
  static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
  static_assert(kStages >= 2 && kStages <= 6, "stages must be 2..6");
  static_assert(BN % 16 == 0, "BN must be a multiple of 16");
  static_assert(kRegPipeline >= 1 && kRegPipeline <= BK / 16, "reg pipeline must be 1..BK/16 k-blocks");
  static_assert(kPrefetch >= 1 && kPrefetch <= kStages - 1, "prefetch must be 1..stages-1 tiles");
  static_assert(BM % (16 * kWarpsM) == 0 && BN % (16 * kWarpsN) == 0, "tile not divisible by the warp layout");
  static_assert(BM % kCopyRowsK == 0 && (kNN || BN % kCopyRowsK == 0), "tile not divisible by the K-major copy");
  static_assert(!kNN || BK % kCopyRowsN == 0, "BK not divisible by the N-major copy");

  // Each warp covers 16x16 per MMA step (two m16n8k16 atoms along N) so ldmatrix.x4 feeds both operands.
  using TiledMma = decltype(make_tiled_mma(typename MmaAtomFor<T>::type{},
                                           Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>{},
                                           Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>{}));

  using SmemLayoutA = decltype(tile_to_shape(typename KMajorSmemAtom<BK>::type{},
                                             Shape<Int<BM>, Int<BK>, Int<kStages>>{}));
  using SmemLayoutB = conditional_t<kNN,
      decltype(tile_to_shape(NMajorSmemAtom<BN>{}, Shape<Int<BN>, Int<BK>, Int<kStages>>{})),
      decltype(tile_to_shape(typename KMajorSmemAtom<BK>::type{}, Shape<Int<BN>, Int<BK>, Int<kStages>>{}))>;
  // Epilogue staging of the output tile in the element type, reusing the pipeline's shared memory.
  using SmemLayoutC = decltype(tile_to_shape(OutputSmemAtom<BN>{}, Shape<Int<BM>, Int<BN>>{}));

  using G2SCopyA = decltype(make_kmajor_g2s_copy<T, kThreads, BK>());
  using G2SCopyB = conditional_t<kNN, decltype(make_nmajor_g2s_copy<T, kThreads, BN>()),
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
