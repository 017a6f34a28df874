// The entries Python calls for cudal2_ops.matmul / linear outside tracing, and for compiled code's out= calls.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace cudal2 {

// Whether an eager call may skip the c10 dispatcher and run the op's kernel directly: no gradient is needed, every
// tensor is a plain strided CPU or CUDA tensor (no Python subclass, functorch wrapper, functional, conjugate, negative
// or sparse tensor), and no thread-local dispatch state would intercept the op (TorchDispatchMode, functionalization,
// vmap, jit tracing, ...). Anything else goes through the registered op, as compiled and traced code does.
bool direct_call_allowed(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias);

at::Tensor linear_entry(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias);
at::Tensor matmul_entry(const at::Tensor& a, const at::Tensor& b);
at::Tensor matmul_out_entry(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);

// What compiled code calls for cudal2::linear (cudal2_ops/inductor_lowering.py) into the output Inductor allocated.
// Compiled graphs run below autograd, so this skips the dispatcher; the profiler still records it as cudal2::linear.
at::Tensor& linear_out_entry(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::Tensor& out);

}  // namespace cudal2
