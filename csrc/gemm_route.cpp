// Routing: which calls the dispatcher can take (CUDA, fp16/bf16, row-major operands with unit inner stride).
#include "gemm_route.h"

#include <ATen/cuda/CUDAContext.h>

namespace cudal2 {
namespace {

// Row stride of a [rows, cols] matrix with the given strides if it is row-major with unit inner stride (size-1 dims
// may have any stride), else -1.
int64_t row_major_ld(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (cols > 1 && col_stride != 1) return -1;
  if (rows <= 1) return std::max<int64_t>(cols, 1);
  return row_stride >= cols ? row_stride : -1;
}

int64_t row_major_ld(const at::Tensor& t) { return row_major_ld(t.size(0), t.size(1), t.stride(0), t.stride(1)); }

// Whether a row-major operand at `ptr` with row stride `ld` over `cols` columns would be read unaligned: a pointer
// or (padded) row stride that is not a multiple of 16 bytes. An unpadded row stride (ld == cols) is the contiguous
// layout itself, which a copy would not change.
bool misaligned(const void* ptr, int64_t ld, int64_t cols) {
  constexpr int64_t kElementBytes = 2;  // fp16 / bf16
  return pointer_alignment(ptr) < 16 || (ld != cols && (ld * kElementBytes) % 16 != 0);
}

// An aligned contiguous copy of `t` (fresh storage from the caching allocator, 16-byte aligned or better).
at::Tensor aligned_copy(const at::Tensor& t) { return t.clone(at::MemoryFormat::Contiguous); }

std::string shape_str(const at::Tensor& t) { return c10::str(t.sizes()); }

}  // namespace

void check_same_device_and_dtype(const char* op, const char* a_name, const at::Tensor& a, const char* b_name,
                                 const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", a_name, " ", shape_str(a), " is on ", a.device(), " but ", b_name,
              " ", shape_str(b), " is on ", b.device(), "; put both on the same device");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": ", a_name, " ", shape_str(a), " is ", a.scalar_type(),
              " but ", b_name, " ", shape_str(b), " is ", b.scalar_type(), "; both must have the same dtype (float16 "
              "and bfloat16 on CUDA take the tuned path, every other dtype runs torch)");
}

BiasForm classify_bias(const at::Tensor* bias, const at::Tensor& x, int64_t n) {
  if (bias == nullptr) return BiasForm::kNone;
  if (bias->device() != x.device() || bias->scalar_type() != x.scalar_type() || bias->dim() > 2) {
    return BiasForm::kTorch;
  }
  const int64_t last = bias->dim() == 0 ? 1 : bias->size(-1);
  const bool leading_ones = bias->dim() < 2 || bias->size(0) == 1;
  return leading_ones && (last == n || last == 1) ? BiasForm::kFused : BiasForm::kTorch;
}

at::Tensor fused_bias_vector(const at::Tensor& bias, int64_t n) {
  if (bias.dim() == 1 && bias.size(0) == n) return bias;
  return bias.numel() == n ? bias.view({n}) : bias.reshape({1}).expand({n});
}

Route route_gemm(const at::Tensor& a, RightOperand b, const at::Tensor* bias, const at::Tensor* out2d,
                 bool prefer_nt) {
  Route r;
  if (!a.is_cuda()) {
    r.torch_reason = "not a CUDA tensor";
    return r;
  }
  if (a.scalar_type() != at::kHalf && a.scalar_type() != at::kBFloat16) {
    r.torch_reason = std::string("dtype ") + c10::toString(a.scalar_type()) + " (tuned path: float16, bfloat16)";
    return r;
  }
  if (a.dim() < 2 || b.t.dim() != 2) {
    r.torch_reason = "operand ranks " + shape_str(a) + " x " + shape_str(b.t) + " (tuned path: a [..., K] x b [K, N])";
    return r;
  }
  const int64_t k = a.size(-1), n = b.n();
  const int64_t m = a.numel() / std::max<int64_t>(k, 1);
  if (a.numel() == 0 || k == 0 || n == 0) {
    r.torch_reason = "empty dimension (M, N or K is 0)";
    return r;
  }
  // A as [M, K]: a 2-D a as it is, a higher-rank a only when contiguous.
  const int64_t lda = a.dim() == 2 ? row_major_ld(a) : (a.is_contiguous() ? k : -1);
  if (lda < 0) {
    r.torch_reason = "a is not row-major with unit inner stride";
    r.obstacle = Route::Obstacle::kA;
    return r;
  }
  // B is read as [K, N] row-major (NN) or, through its transpose, as [N, K] row-major (NT); where both read it (K or
  // N is 1), NN unless `prefer_nt`.
  GemmArgs& g = r.args;
  const int64_t ld_nn = row_major_ld(k, n, b.stride_k(), b.stride_n());
  const int64_t ld_nt = row_major_ld(n, k, b.stride_n(), b.stride_k());
  if (ld_nt >= 0 && (prefer_nt || ld_nn < 0)) {
    g.layout = CUDAL2_NT;
    g.ldb = ld_nt;
  } else if (ld_nn >= 0) {
    g.layout = CUDAL2_NN;
    g.ldb = ld_nn;
  } else {
    r.torch_reason = "b has no unit-stride dimension";
    r.obstacle = Route::Obstacle::kB;
    return r;
  }
  if (bias != nullptr && (bias->device() != a.device() || bias->scalar_type() != a.scalar_type())) {
    r.torch_reason = "bias has another dtype or device than the input";
    return r;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != n || bias->stride(0) != 1)) {
    r.torch_reason = "bias is not a contiguous [N] vector";
    if (bias->numel() == n) r.obstacle = Route::Obstacle::kBias;
    return r;
  }
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.data_ptr();
  g.lda = lda;
  g.b = b.t.data_ptr();
  g.dtype = a.scalar_type() == at::kBFloat16 ? CUDAL2_BF16 : CUDAL2_FP16;
  g.bias = bias != nullptr ? bias->data_ptr() : nullptr;
  g.device = a.get_device();
  g.stream = at::cuda::getCurrentCUDAStream(g.device).stream();
  if (out2d != nullptr) {
    g.ldd = row_major_ld(*out2d);
    if (g.ldd < 0) {
      r.torch_reason = "out is not row-major with unit inner stride";
      return r;
    }
    g.d = out2d->data_ptr();
  }
  r.ours = true;
  return r;
}

bool output_misaligned(const at::Tensor& out) {
  return !out.is_contiguous() || pointer_alignment(out.data_ptr()) < 16;
}

Route route_or_copy(const at::Tensor& a, RightOperand b, const at::Tensor* bias, RoutedOperands& keep) {
  keep.a = a;
  keep.b = b.t;
  keep.b_nk = b.nk;
  if (bias != nullptr) keep.bias = *bias;
  for (;;) {
    Route route = route_gemm(keep.a, RightOperand{keep.b, keep.b_nk}, bias != nullptr ? &keep.bias : nullptr, nullptr,
                             bias != nullptr);
    if (route.ours) {
      const GemmArgs& g = route.args;
      if (misaligned(g.a, g.lda, g.k)) {
        route.obstacle = Route::Obstacle::kA;
      } else if (misaligned(g.b, g.ldb, g.layout == CUDAL2_NN ? g.n : g.k)) {
        route.obstacle = Route::Obstacle::kB;
      } else if (g.bias != nullptr && g.layout == CUDAL2_NN) {
        // cuBLASLt's bias epilogue on the NN layout (a linear whose weight is stored [K, N]) was measured on an H200
        // (cuBLASLt 13.1, fuzz seed 0: 6 of 10,000 cases, with and without split-K) to round one step worse than
        // acc + bias rounded once; its NT layout never did. Such a weight is copied to [N, K].
        route.obstacle = Route::Obstacle::kB;
      } else if (g.bias != nullptr && pointer_alignment(g.bias) < 16) {
        route.obstacle = Route::Obstacle::kBias;
      }
    }
    switch (route.obstacle) {
      case Route::Obstacle::kNone: return route;
      case Route::Obstacle::kA: keep.a = aligned_copy(keep.a); break;
      case Route::Obstacle::kB: {
        // Copied as [N, K] storage (NT) for an NT call or one with a bias, else as [K, N] storage (NN); the copy keeps
        // the logical shape of the stored operand.
        const bool as_nt = route.ours && (route.args.layout == CUDAL2_NT || route.args.bias != nullptr);
        keep.b = as_nt == keep.b_nk ? aligned_copy(keep.b) : aligned_copy(keep.b.t()).t();
        break;
      }
      case Route::Obstacle::kBias: keep.bias = aligned_copy(keep.bias.reshape({-1})); break;
    }
  }
}

}  // namespace cudal2
