// Turns torch tensors into a GemmArgs for the dispatcher, or says why the call must go to torch instead.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "gemm_args.h"

namespace cudal2 {

// The second operand as the dispatcher sees it: `b` ([K, N] for NN, [N, K] for NT) with its row stride.
struct Operand {
  at::Tensor b;
  cudal2_layout layout;
  int64_t ldb;
};

// Result of routing a call: either `args` is filled (our path) or `torch_reason` says why torch runs it.
struct Route {
  bool ours = false;
  GemmArgs args;
  std::string torch_reason;
  // Which operand's strides keep the call off our path (a contiguous copy of it would take our path).
  enum class StrideObstacle { kNone, kA, kB, kBias } strides = StrideObstacle::kNone;
  at::Tensor a2d;             // A viewed as [M, K]
};

// Validates the inputs of cudal2.matmul / cudal2.linear (same device, same dtype, matching inner dims) and throws a
// c10::Error naming the problem and what is supported. `op` is used in messages.
void check_gemm_inputs(const char* op, const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias);

// Routes a @ b_kn (+ bias), where b_kn is the logical [K, N] right operand (for linear: weight.t()).
// `out2d` (optional) is the [M, N] destination.
Route route_gemm(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, const at::Tensor* out2d);

// route_gemm, except that an operand whose strides keep the call off our path is replaced by a contiguous copy
// (correct, not tuned), so fp16/bf16 CUDA calls always get fp32 accumulation with a single rounding. `keep` holds the
// operands used (copies included) alive until the GEMM is enqueued.
Route route_or_copy(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, std::vector<at::Tensor>& keep);

}  // namespace cudal2
