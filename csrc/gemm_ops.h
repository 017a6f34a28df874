// The torch-facing GEMM entry points (registered as torch.ops.cudal2.* and bound for the eager fast path).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace cudal2 {

// torch.matmul semantics. a [..., K], b [K, N] take the tuned path on CUDA fp16/bf16; anything else runs torch.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);

// torch.matmul(a, b, out=out) semantics.
at::Tensor& matmul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);

// F.linear semantics: x [..., K], weight [N, K], bias [N] or none.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias);

// F.linear(x, weight, bias) written into `out` ([..., N], x's dtype and device): the tuned path writes `out` directly
// when it is contiguous and 16-byte aligned, anything else computes `linear` and copies. What compiled code calls
// (cudal2_ops/inductor_lowering.py), where Inductor has allocated the output.
at::Tensor& linear_out(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::Tensor& out);

}  // namespace cudal2
