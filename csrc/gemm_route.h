// Turns torch tensors into a GemmArgs for the dispatcher, or says why the call must go to torch instead.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "gemm_args.h"

namespace cudal2 {

// Result of routing a call: either `args` is filled (our path) or `torch_reason` says why torch runs it.
struct Route {
  bool ours = false;
  GemmArgs args;
  std::string torch_reason;
  // Which operand keeps the call off our path or off cuBLASLt's aligned kernels (an aligned contiguous copy of it
  // would take them): strides without a unit dimension, or a pointer / row stride that is not 16-byte aligned.
  enum class Obstacle { kNone, kA, kB, kBias } obstacle = Obstacle::kNone;
};

// The bias the routing functions take: a pointer to `bias` when it holds a defined tensor, else nullptr.
inline const at::Tensor* bias_or_null(const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? &*bias : nullptr;
}

// Validates what torch.matmul and F.linear reject for every input: operands on different devices or of different
// dtypes. Throws a c10::Error naming both operands and what is supported; `op` and the names are used in messages.
void check_same_device_and_dtype(const char* op, const char* a_name, const at::Tensor& a, const char* b_name,
                                 const at::Tensor& b);

// The right operand of a GEMM as it is stored: `t` is [K, N], or [N, K] when `nk` (a linear's weight, read through
// its transpose without creating a view).
struct RightOperand {
  const at::Tensor& t;
  bool nk;
  int64_t k() const { return t.size(nk ? 1 : 0); }
  int64_t n() const { return t.size(nk ? 0 : 1); }
  int64_t stride_k() const { return t.stride(nk ? 1 : 0); }
  int64_t stride_n() const { return t.stride(nk ? 0 : 1); }
};

// How F.linear's bias enters the GEMM. kFused: a bias of x's dtype and device shaped [N], [1, N], [1], [1, 1] or 0-d
// (F.linear accepts these for every input rank), added in the epilogue as an [N] vector. kTorch: any other bias,
// which F.linear broadcasts by rules that depend on the input's rank and contiguity, so torch runs the call.
enum class BiasForm { kNone, kFused, kTorch };
BiasForm classify_bias(const at::Tensor* bias, const at::Tensor& x, int64_t n);

// The [N] vector a kFused bias is added as: the bias itself when it is [N], else a view of it (expanded when it
// holds one element; route_or_copy stages that as a contiguous copy).
at::Tensor fused_bias_vector(const at::Tensor& bias, int64_t n);

// Routes a @ b (+ bias). `out2d` (optional) is the [M, N] destination. `prefer_nt`: a b readable both ways (K or N
// is 1) is read as NT.
Route route_gemm(const at::Tensor& a, RightOperand b, const at::Tensor* bias, const at::Tensor* out2d,
                 bool prefer_nt = false);

// Whether `out` cannot be written in place by the aligned path (not contiguous, or not 16-byte aligned): the result
// is then computed into a fresh tensor and copied into `out`.
bool output_misaligned(const at::Tensor& out);

// route_gemm, except that an operand whose strides keep the call off our path, or whose pointer or row stride is not
// 16-byte aligned, is replaced by an aligned contiguous copy (correct, not tuned), and a weight stored [K, N] that
// comes with a bias by an [N, K] copy (NT). So an fp16/bf16 CUDA call computes exactly as on contiguous inputs: a
// table kernel (TMA needs 16-byte alignment) or cuBLASLt, never torch's own path, which may reduce split-K partials
// in 16 bits. `keep` holds the operands used (copies included) alive until the GEMM is enqueued.
struct RoutedOperands {
  at::Tensor a, b, bias;
  bool b_nk = false;  // b is stored [N, K]
};
Route route_or_copy(const at::Tensor& a, RightOperand b, const at::Tensor* bias, RoutedOperands& keep);

}  // namespace cudal2
