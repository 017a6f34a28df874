// Routing: which calls the dispatcher can take (CUDA, fp16/bf16, row-major operands with unit inner stride).
#include "gemm_route.h"

#include <ATen/cuda/CUDAContext.h>

namespace cudal2 {
namespace {

// Row stride of a 2-D tensor that is row-major with unit inner stride (size-1 dims may have any stride), else -1.
int64_t row_major_ld(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (cols > 1 && t.stride(1) != 1) return -1;
  if (rows <= 1) return std::max<int64_t>(cols, 1);
  return t.stride(0) >= cols ? t.stride(0) : -1;
}

std::string shape_str(const at::Tensor& t) { return c10::str(t.sizes()); }

}  // namespace

void check_gemm_inputs(const char* op, const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias) {
  TORCH_CHECK(a.device() == b_kn.device(), op, ": inputs are on different devices (", a.device(), " and ",
              b_kn.device(), "); put both on the same device");
  TORCH_CHECK(a.scalar_type() == b_kn.scalar_type(), op, ": inputs have different dtypes (", a.scalar_type(), " and ",
              b_kn.scalar_type(), "); both must have the same dtype (float16 or bfloat16 take the tuned path, "
              "others run through torch)");
  if (bias != nullptr) {
    TORCH_CHECK(bias->device() == a.device(), op, ": bias is on ", bias->device(), " but the input is on ",
                a.device());
    TORCH_CHECK(bias->scalar_type() == a.scalar_type(), op, ": bias dtype ", bias->scalar_type(),
                " differs from the input dtype ", a.scalar_type());
  }
}

Route route_gemm(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, const at::Tensor* out2d) {
  Route r;
  if (!a.is_cuda()) {
    r.torch_reason = "not a CUDA tensor";
    return r;
  }
  if (a.scalar_type() != at::kHalf && a.scalar_type() != at::kBFloat16) {
    r.torch_reason = std::string("dtype ") + c10::toString(a.scalar_type()) + " (tuned path: float16, bfloat16)";
    return r;
  }
  if (a.dim() < 2 || b_kn.dim() != 2) {
    r.torch_reason = "operand ranks " + shape_str(a) + " x " + shape_str(b_kn) + " (tuned path: a [..., K] x b [K, N])";
    return r;
  }
  const int64_t k = a.size(-1), n = b_kn.size(1);
  const int64_t m = a.numel() / std::max<int64_t>(k, 1);
  if (a.numel() == 0 || k == 0 || n == 0) {
    r.torch_reason = "empty dimension (M, N or K is 0)";
    return r;
  }
  r.a2d = a.dim() == 2 ? a : (a.is_contiguous() ? a.view({m, k}) : at::Tensor());
  const int64_t lda = r.a2d.defined() ? row_major_ld(r.a2d) : -1;
  if (lda < 0) {
    r.torch_reason = "a is not row-major with unit inner stride";
    r.strides = Route::StrideObstacle::kA;
    return r;
  }
  Operand op;
  const at::Tensor b_nk = b_kn.t();
  if (int64_t ld = row_major_ld(b_kn); ld >= 0) {
    op = {b_kn, CUDAL2_NN, ld};
  } else if (int64_t ld_t = row_major_ld(b_nk); ld_t >= 0) {
    op = {b_nk, CUDAL2_NT, ld_t};
  } else {
    r.torch_reason = "b has no unit-stride dimension";
    r.strides = Route::StrideObstacle::kB;
    return r;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != n || bias->stride(0) != 1)) {
    r.torch_reason = "bias is not a contiguous [N] vector";
    if (bias->numel() == n) r.strides = Route::StrideObstacle::kBias;
    return r;
  }
  GemmArgs& g = r.args;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = r.a2d.data_ptr();
  g.lda = lda;
  g.b = op.b.data_ptr();
  g.ldb = op.ldb;
  g.layout = op.layout;
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

Route route_or_copy(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, std::vector<at::Tensor>& keep) {
  keep = {a, b_kn, bias != nullptr ? *bias : at::Tensor()};
  for (;;) {
    Route route = route_gemm(keep[0], keep[1], bias != nullptr ? &keep[2] : nullptr, nullptr);
    switch (route.strides) {
      case Route::StrideObstacle::kNone: return route;
      case Route::StrideObstacle::kA: keep[0] = keep[0].contiguous(); break;
      case Route::StrideObstacle::kB: keep[1] = keep[1].contiguous(); break;
      case Route::StrideObstacle::kBias: keep[2] = keep[2].reshape({-1}).contiguous(); break;
    }
  }
}

}  // namespace cudal2
