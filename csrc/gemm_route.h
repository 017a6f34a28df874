// Turns torch tensors into a GemmArgs for the dispatcher, or says why the call must go to torch instead.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

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

// Validates the inputs of cudal2.matmul / cudal2.linear (same device, same dtype, matching inner dims) and throws a
// c10::Error naming the problem and what is supported. `op` is used in messages.
void check_gemm_inputs(const char* op, const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias);

// Routes a @ b_kn (+ bias), where b_kn is the logical [K, N] right operand (for linear: weight.t()).
// `out2d` (optional) is the [M, N] destination. `prefer_nt`: a b_kn readable both ways (K or N is 1) is read as NT.
Route route_gemm(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, const at::Tensor* out2d,
                 bool prefer_nt = false);

// Whether `out` cannot be written in place by the aligned path (not contiguous, or not 16-byte aligned): the result
// is then computed into a fresh tensor and copied into `out`.
bool output_misaligned(const at::Tensor& out);

// route_gemm, except that an operand whose strides keep the call off our path, or whose pointer or row stride is not
// 16-byte aligned, is replaced by an aligned contiguous copy (correct, not tuned), and a weight stored [K, N] that
// comes with a bias by an [N, K] copy (NT). So an fp16/bf16 CUDA call computes exactly as on contiguous inputs: a
// table kernel (TMA needs 16-byte alignment) or cuBLASLt, never torch's own path, which may reduce split-K partials
// in 16 bits. `keep` holds the operands used (copies included) alive until the GEMM is enqueued.
Route route_or_copy(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, std::vector<at::Tensor>& keep);

}  // namespace cudal2
