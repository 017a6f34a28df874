// Kernel family `sm90_tma_ws`: CUTLASS 3.x GemmUniversal for sm_90a (TMA loads, WGMMA, warp-specialized
// producer/consumer pipeline), exposed through the kernel C ABI of cudal2/abi.h.
//
// D[M, N] = A[M, K] @ op(B) (+ bias[N]) with fp32 accumulation, D in the input dtype. A and D are row-major. For the
// NN layout B is [K, N] row-major (CUTLASS RowMajor B); for NT B is [N, K] row-major (CUTLASS ColumnMajor B).
// Each kernel holds two CUTLASS GEMMs that differ only in the epilogue: calls with a bias run the sm90 EVT
// `LinCombPerColBias` (acc + bias[n] in fp32, one rounding), calls without one run `ScaledAcc` (no bias leaf to
// load or broadcast). There is no C operand. Configurations with SwapAB (NT only, for small M such as LLM decode)
// compute D^T = B A^T: the weight rows tile CUTLASS's M and the rows of A its N (see TmaWsGemmImpl).
// Configurations with the no-smem epilogue (EpilogueKind::kNoSmem, for small tiles and small problems) store the
// accumulators straight from registers (CUTLASS's DefaultEpilogue): no staging in shared memory, which goes to
// mainloop stages instead, and no TMA store descriptor; the bias is read as a C operand broadcast along the rows
// (stride 0), D = acc + 1 * bias in fp32, rounded once.
//
// Launches use programmatic dependent launch (PDL): the kernel is compiled with CUTLASS's grid-dependency control,
// whose producer warps wait for the preceding grid on the stream to complete (griddepcontrol.wait) before any load,
// and every store follows those loads, so the early launch only overlaps this kernel's prologue with the previous
// kernel's tail. CUDAL2_DISABLE_PDL=1 in the environment launches without it.
//
// Runtime knobs of cudal2_problem for this family:
//   raster  0 = CUTLASS heuristic, 1 = along M, 2 = along N (order in which output tiles are walked)
//   swizzle max_swizzle_size of the tile scheduler (0 = 1, i.e. no swizzle)
//   splits  stream-K scheduler only: 0 = heuristic decomposition, 1 = data parallel, s > 1 = split-K in s parts.
//           Ignored by the persistent scheduler. Partial sums always go through the caller's workspace and are
//           reduced in a fixed order (ReductionMode::Deterministic), so results are bitwise reproducible.
//
// Torch-free: kernel translation units include only this header and the CUTLASS/CuTe headers.
#ifndef CUDAL2_SM90_TMA_WS_CUH_
#define CUDAL2_SM90_TMA_WS_CUH_

#include <climits>
#include <type_traits>

// Grid-dependency control (griddepcontrol.wait / launch_dependents) in CUTLASS's sm90 kernels; no-ops unless the
// kernel is launched with the programmatic-stream-serialization attribute. A translation unit defines
// CUDAL2_SM90_GDC 0 before including this header to build without it (CUTLASS 4.2's stream-K scheduler does not
// compile with it: its const is_last_tile binds a member to a non-const reference); such kernels launch without PDL.
#ifndef CUDAL2_SM90_GDC
#define CUDAL2_SM90_GDC 1
#endif
#if CUDAL2_SM90_GDC && !defined(CUTLASS_ENABLE_GDC_FOR_SM90)
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/bfloat16.h>
#include <cutlass/half.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "cudal2/kernel_export.h"
#include "cudal2/launch.cuh"
#include "cudal2/params_cache.h"

namespace cudal2 {
namespace sm90 {

// Warp-specialized mainloop schedule: two consumer warpgroups sharing one tile (cooperative) or alternating tiles.
enum class Schedule { kCooperative, kPingpong };
// Tile scheduler: persistent data-parallel tiles, or stream-K (also split-K / data parallel by the `splits` knob).
enum class TileScheduler { kPersistent, kStreamK };
// Epilogue: fusion callbacks with D staged in shared memory and stored by TMA, or stores straight from registers.
enum class EpilogueKind { kTma, kNoSmem };

// TMA needs 16-byte aligned base pointers and 16-byte multiples for every non-unit stride.
constexpr int kAlignElements = 8;
constexpr size_t kAlignBytes = 16;

// Mainloop and epilogue schedule tags of CUTLASS for our schedule.
template <Schedule S>
struct ScheduleTags {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>
struct ScheduleTags<Schedule::kPingpong> {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

// Multiprocessor count for the hardware info: the problem's, or the current device's (cached per device).
inline int sm_count_of(const cudal2_problem* p) { return p->sm_count > 0 ? p->sm_count : current_device_sm_count(); }

// Maps the ABI raster knob to CUTLASS's option.
inline cutlass::gemm::kernel::detail::RasterOrderOptions raster_of(int raster) {
  using R = cutlass::gemm::kernel::detail::RasterOrderOptions;
  return raster == 1 ? R::AlongM : raster == 2 ? R::AlongN : R::Heuristic;
}

// Epilogue fusion of one CUTLASS GEMM: D = acc + bias (fp32, rounded once; bias[n] runs along CUTLASS's N, or
// along its M when the operands are swapped), or D = acc.
template <class Element, bool kBias, bool kSwapAB>
using EpilogueFusion = std::conditional_t<
    kBias,
    std::conditional_t<kSwapAB, cutlass::epilogue::fusion::LinCombPerRowBias<Element, float, Element, Element, float>,
                       cutlass::epilogue::fusion::LinCombPerColBias<Element, float, Element, Element, float>>,
    cutlass::epilogue::fusion::ScaledAcc<Element, float, float>>;

// The epilogue collective of one GEMM. TMA: the fusion above, D staged in shared memory and stored by TMA. No-smem:
// D = alpha * acc (+ beta * C, C being the bias broadcast along rows when kBias) stored from registers.
template <EpilogueKind Epi, class Element, class TileShape, class ClusterShape, class LayoutD, class EpilogueSchedule,
          bool kBias, bool kSwapAB>
struct EpilogueCollective {
  using type = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignElements,  // no C operand
      Element, LayoutD, kAlignElements, EpilogueSchedule, EpilogueFusion<Element, kBias, kSwapAB>>::CollectiveOp;
};
template <class Element, class TileShape, class ClusterShape, class LayoutD, class EpilogueSchedule, bool kBias,
          bool kSwapAB>
struct EpilogueCollective<EpilogueKind::kNoSmem, Element, TileShape, ClusterShape, LayoutD, EpilogueSchedule, kBias,
                          kSwapAB> {
  using ElementC = std::conditional_t<kBias, Element, void>;  // void: no source load, D = alpha * acc
  using type = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD, kAlignElements, Element,
      LayoutD, kAlignElements, cutlass::epilogue::NoSmemWarpSpecialized,
      cutlass::epilogue::fusion::LinearCombination<Element, float, ElementC, float>>::CollectiveOp;
};

// One CUTLASS GEMM of the family (with or without the bias epilogue). `Stages` == 0 lets CUTLASS fill the shared
// memory left after the epilogue. With `SwapAB` (NT only) CUTLASS computes D^T = B A^T: the weight B [N, K] is its
// A operand (tiles of TileM weight rows), A [M, K] its B operand (TileN rows of the small M), and D^T [N, M] is
// column-major, i.e. D row-major. That puts a small M (LLM decode) on WGMMA's narrow N side.
template <class Element, int Layout, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Sched,
          TileScheduler Tiles, int Stages, bool SwapAB, EpilogueKind Epi, bool kBias>
struct TmaWsGemmImpl {
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "sm90_tma_ws supports fp16 and bf16");
  static_assert(Layout == CUDAL2_NN || Layout == CUDAL2_NT, "unknown layout");
  static_assert(!SwapAB || Layout == CUDAL2_NT, "swapped operands are built for the NT layout only");
  static_assert(Tiles == TileScheduler::kPersistent || Sched == Schedule::kCooperative,
                "CUTLASS's stream-K scheduler needs the cooperative schedule");
  static_assert(Tiles == TileScheduler::kPersistent || !CUDAL2_SM90_GDC,
                "stream-K kernels are built with CUDAL2_SM90_GDC 0 (see the top of this header)");
  static_assert(Epi == EpilogueKind::kTma || Tiles == TileScheduler::kPersistent,
                "the no-smem epilogue is built with the persistent scheduler only");

  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = std::conditional_t<Layout == CUDAL2_NN, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutD = std::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Accumulator = float;
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using Tags = ScheduleTags<Sched>;
  using CollectiveEpilogue = typename EpilogueCollective<Epi, Element, TileShape, ClusterShape, LayoutD,
                                                         typename Tags::Epilogue, kBias, SwapAB>::type;

  using StageCount = std::conditional_t<
      Stages == 0,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::collective::StageCount<(Stages > 0 ? Stages : 2)>>;  // the 2 only names a type never used

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignElements, Element, LayoutB,
      kAlignElements, Accumulator, TileShape, ClusterShape, StageCount, typename Tags::Mainloop>::CollectiveOp;

  using SchedulerTag = std::conditional_t<Tiles == TileScheduler::kStreamK, cutlass::gemm::StreamKScheduler,
                                          cutlass::gemm::PersistentScheduler>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, SchedulerTag>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arguments = typename Gemm::Arguments;

  // CUTLASS arguments for the problem (strides from the leading dimensions; batch count 1).
  static Arguments arguments(const cudal2_problem* p) {
    using cute::_1;
    const auto* a = static_cast<const Element*>(p->a);
    const auto* b = static_cast<const Element*>(p->b);
    Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    typename Kernel::StrideD stride_d;
    if constexpr (SwapAB) {  // CUTLASS's A = weight [N, K], B = activations [M, K] (K-major), D^T column-major
      typename Kernel::StrideA stride_w = cute::make_stride(p->ldb, _1{}, p->n * p->ldb);
      typename Kernel::StrideB stride_x = cute::make_stride(p->lda, _1{}, p->m * p->lda);
      stride_d = cute::make_stride(_1{}, p->ldd, p->m * p->ldd);
      args.problem_shape = {static_cast<int>(p->n), static_cast<int>(p->m), static_cast<int>(p->k), 1};
      args.mainloop = {b, stride_w, a, stride_x};
    } else {
      typename Kernel::StrideA stride_a = cute::make_stride(p->lda, _1{}, p->m * p->lda);
      typename Kernel::StrideB stride_b;
      if constexpr (Layout == CUDAL2_NN) {
        stride_b = cute::make_stride(_1{}, p->ldb, p->k * p->ldb);
      } else {
        stride_b = cute::make_stride(p->ldb, _1{}, p->n * p->ldb);
      }
      stride_d = cute::make_stride(p->ldd, _1{}, p->m * p->ldd);
      args.problem_shape = {static_cast<int>(p->m), static_cast<int>(p->n), static_cast<int>(p->k), 1};
      args.mainloop = {a, stride_a, b, stride_b};
    }
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = stride_d;
    if constexpr (kBias && Epi == EpilogueKind::kNoSmem) {  // C = bias broadcast along D's rows
      args.epilogue.thread.beta = 1.0f;
      args.epilogue.ptr_C = static_cast<const Element*>(p->bias);
      if constexpr (SwapAB) {
        args.epilogue.dC = cute::make_stride(_1{}, int64_t(0), int64_t(0));
      } else {
        args.epilogue.dC = cute::make_stride(int64_t(0), _1{}, int64_t(0));
      }
    } else if constexpr (kBias) {
      args.epilogue.thread.beta = 0.0f;
      args.epilogue.thread.bias_ptr = static_cast<const Element*>(p->bias);
    }
    args.epilogue.ptr_D = static_cast<Element*>(p->d);
    args.epilogue.dD = stride_d;
    args.hw_info.device_id = 0;  // only read when sm_count is 0, which sm_count_of avoids
    args.hw_info.sm_count = sm_count_of(p);
    args.scheduler.max_swizzle_size = p->swizzle > 0 ? p->swizzle : 1;
    args.scheduler.raster_order = raster_of(p->raster);
    if constexpr (Tiles == TileScheduler::kStreamK) {
      using Decomposition = typename Kernel::TileScheduler::DecompositionMode;
      args.scheduler.splits = p->splits > 1 ? p->splits : 1;
      args.scheduler.decomposition_mode = p->splits > 1    ? Decomposition::SplitK
                                          : p->splits == 1 ? Decomposition::DataParallel
                                                           : Decomposition::Heuristic;
      args.scheduler.reduction_mode = Kernel::TileScheduler::ReductionMode::Deterministic;
    }
    return args;
  }

  // CUTLASS's own can_implement for the problem.
  static bool cutlass_can_implement(const cudal2_problem* p) {
    return Gemm::can_implement(arguments(p)) == cutlass::Status::kSuccess;
  }

  // Workspace CUTLASS's kernel needs (stream-K partials and locks; 0 for most persistent runs).
  static size_t workspace_size(const cudal2_problem* p) { return Gemm::get_workspace_size(arguments(p)); }

  // Builds the params (TMA descriptors) on the host, or reuses those of a repeated problem (params_cache.h), and
  // enqueues the kernel on p->stream. What GemmUniversalAdapter::initialize() does, except that the dynamic
  // shared-memory opt-in is set once per device (initialize() sets it on every call: a runtime call of microseconds
  // on the eager path).
  static cudal2_status launch(const cudal2_problem* p) {
    const Arguments args = arguments(p);
    if (p->workspace_bytes < Gemm::get_workspace_size(args)) return CUDAL2_WORKSPACE_TOO_SMALL;
    cudaStream_t stream = static_cast<cudaStream_t>(p->stream);
    // Stream-K partials and locks are zeroed per launch (a no-op for the other schedulers).
    if (Kernel::initialize_workspace(args, p->workspace, stream) != cutlass::Status::kSuccess)
      return CUDAL2_LAUNCH_FAILED;
    thread_local ParamsCache<typename Kernel::Params> cache;
    typename Kernel::Params params =
        cache.get(*p, [&] { return Kernel::to_underlying_arguments(args, p->workspace); });
    if (allow_dynamic_smem<cutlass::device_kernel<Kernel>>(Kernel::SharedStorageSize) != cudaSuccess)
      return CUDAL2_LAUNCH_FAILED;
    // run() checks the launch with cudaGetLastError itself.
    // Only kernels built with grid-dependency control (loads wait for the preceding grid) may launch with PDL.
    const bool pdl = CUDAL2_SM90_GDC && cudal2::pdl_allowed();
    return Gemm::run(params, stream, nullptr, pdl) == cutlass::Status::kSuccess ? CUDAL2_OK : CUDAL2_LAUNCH_FAILED;
  }
};

// One kernel of the family as the C ABI sees it: the bias and bias-free GEMMs of one configuration, picked per call.
template <class Element, int Layout, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Sched,
          TileScheduler Tiles, int Stages, bool SwapAB = false, EpilogueKind Epi = EpilogueKind::kTma>
struct TmaWsGemm {
  static constexpr int kDtype = std::is_same_v<Element, cutlass::half_t> ? CUDAL2_FP16 : CUDAL2_BF16;
  using WithBias = TmaWsGemmImpl<Element, Layout, TileM, TileN, TileK, ClusterM, ClusterN, Sched, Tiles, Stages,
                                 SwapAB, Epi, true>;
  using NoBias = TmaWsGemmImpl<Element, Layout, TileM, TileN, TileK, ClusterM, ClusterN, Sched, Tiles, Stages, SwapAB,
                               Epi, false>;

  // ABI can_implement: common checks, TMA alignment, int32 extents, then CUTLASS's own can_implement.
  static cudal2_status can_implement(const cudal2_problem* p) {
    const cudal2_status common = check_common(p, kDtype, Layout);
    if (common != CUDAL2_OK) return common;
    if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX) return CUDAL2_UNSUPPORTED;
    if (p->splits < 0 || p->swizzle < 0 || p->raster < 0 || p->raster > 2) return CUDAL2_UNSUPPORTED;
    if (!is_aligned(p->a, kAlignBytes) || !is_aligned(p->b, kAlignBytes) || !is_aligned(p->d, kAlignBytes))
      return CUDAL2_UNSUPPORTED;
    if (p->bias != nullptr && !is_aligned(p->bias, kAlignBytes)) return CUDAL2_UNSUPPORTED;
    if (p->lda % kAlignElements || p->ldb % kAlignElements || p->ldd % kAlignElements) return CUDAL2_UNSUPPORTED;
    if (sm_count_of(p) <= 0) return CUDAL2_UNSUPPORTED;
    const bool ok = p->bias != nullptr ? WithBias::cutlass_can_implement(p) : NoBias::cutlass_can_implement(p);
    return ok ? CUDAL2_OK : CUDAL2_UNSUPPORTED;
  }

  // ABI workspace_size.
  static size_t workspace_size(const cudal2_problem* p) {
    if (can_implement(p) != CUDAL2_OK) return 0;
    return p->bias != nullptr ? WithBias::workspace_size(p) : NoBias::workspace_size(p);
  }

  // ABI launch.
  static cudal2_status launch(const cudal2_problem* p) {
    const cudal2_status ok = can_implement(p);
    if (ok != CUDAL2_OK) return ok;
    return p->bias != nullptr ? WithBias::launch(p) : NoBias::launch(p);
  }
};

}  // namespace sm90
}  // namespace cudal2

#endif  // CUDAL2_SM90_TMA_WS_CUH_
