// Turns torch tensors into a GemmArgs for the dispatcher, or says why the call must go to torch instead.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

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
  at::Tensor a2d;  // A viewed as [M, K]
};

// Validates the inputs of cudal2.matmul / cudal2.linear (same device, same dtype, matching inner dims) and throws a
// c10::Error naming the problem and what is supported. `op` is used in messages.
void check_gemm_inputs(const char* op, const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias);

// Routes a @ b_kn (+ bias), where b_kn is the logical [K, N] right operand (for linear: weight.t()).
// `out2d` (optional) is the [M, N] destination.
Route route_gemm(const at::Tensor& a, const at::Tensor& b_kn, const at::Tensor* bias, const at::Tensor* out2d);

}  // namespace cudal2
