// GEMM entry points: validate, route, dispatch; torch runs whatever the dispatcher cannot, with torch's own semantics.
#include "gemm_ops.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>

#include <typeinfo>

#include "dispatch.h"
#include "gemm_route.h"

namespace cudal2 {
namespace {

at::DimVector output_sizes(const at::Tensor& a, int64_t n) {
  at::DimVector sizes(a.sizes());
  sizes.back() = n;
  return sizes;
}

// The [..., N] output of a routed call, allocated once (straight from the CUDA caching allocator, no dispatch).
at::Tensor empty_output(const at::Tensor& a, int64_t n) {
  return at::detail::empty_cuda(output_sizes(a, n), a.scalar_type(), a.device(), std::nullopt);
}

// Dispatches a routed call into `out` (contiguous, [..., N]). False: the caller must run torch instead.
bool dispatch_into(Route& route, const at::Tensor& out) {
  route.args.d = out.data_ptr();
  route.args.ldd = route.args.n;
  return Dispatcher::instance().run(route.args);
}

// Called when torch must run a routed call that neither a table kernel nor cuBLASLt could run: said once, since
// torch's own cuBLAS path may reduce split-K partial sums in 16 bits, which cudal2's contract does not do silently.
void warn_torch_runs(const GemmArgs& g) {
  TORCH_WARN_ONCE("cudal2: neither a table kernel nor cuBLASLt could run a ", g.layout == CUDAL2_NT ? "linear" : "matmul",
                  " of M=", g.m, " N=", g.n, " K=", g.k, "; torch runs it (and any further such call)");
}

bool takes_tuned_path(const at::Tensor& t) {
  return t.is_cuda() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
}

std::string describe(const char* name, const at::Tensor* t) {
  if (t == nullptr) return std::string(name) + " None";
  return c10::str(name, " ", t->sizes(), " (", t->scalar_type(), ", ", t->device(), ")");
}

// Runs torch's own op for a call cudal2 hands over. Where torch rejects the inputs with a plain RuntimeError, the
// message gains the call's operands and what cudal2 supports; torch's other error classes pass unchanged, so every
// call raises what torch raises.
template <typename TorchCall>
decltype(auto) run_torch(const char* op, const char* a_name, const at::Tensor& a, const char* b_name,
                         const at::Tensor& b, const at::Tensor* bias, TorchCall&& call) {
  try {
    return call();
  } catch (const c10::Error& e) {
    if (typeid(e) != typeid(c10::Error)) throw;
    TORCH_CHECK(false, op, ": torch rejects ", describe(a_name, &a), ", ", describe(b_name, &b),
                bias != nullptr ? ", " + describe("bias", bias) : std::string(), " (cudal2 accepts what torch accepts; "
                "tuned path: CUDA float16/bfloat16, a [..., K] with b [K, N] or weight [N, K], bias [N], [1, N], [1] "
                "or 0-d): ", e.what_without_backtrace());
  }
}

bool mixed(const at::Tensor& a, const at::Tensor& b) {
  return a.device() != b.device() || a.scalar_type() != b.scalar_type();
}

// Operands on two devices or of two dtypes: torch's result where torch gives one (it does for an empty product of a
// non-contiguous batch, without comparing dtypes), else cudal2's error naming both; torch's error classes other than
// RuntimeError pass unchanged.
template <typename TorchCall>
at::Tensor mixed_operands(const char* op, const char* a_name, const at::Tensor& a, const char* b_name,
                          const at::Tensor& b, TorchCall&& call) {
  try {
    return call();
  } catch (const c10::Error& e) {
    if (typeid(e) != typeid(c10::Error)) throw;
  }
  check_same_device_and_dtype(op, a_name, a, b_name, b);
  TORCH_INTERNAL_ASSERT(false, op, ": mixed operands passed the device and dtype check");
}

void check_inner_dims(const char* op, const at::Tensor& a, RightOperand b) {
  TORCH_CHECK(a.size(-1) == b.k(), op, ": ", b.nk ? "input " : "a ", a.sizes(), " has ", a.size(-1), " features "
              "(last dim) but ", b.nk ? "weight " : "b ", b.t.sizes(), " expects K=", b.k(),
              b.nk ? " (weight is [N, K])" : " (b is [K, N]); they cannot be multiplied");
}

}  // namespace

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  const auto torch_matmul = [&] { return run_torch("cudal2.matmul", "a", a, "b", b, nullptr, [&] {
    return at::matmul(a, b); }); };
  if (a.dim() < 2 || b.dim() != 2) return torch_matmul();
  if (mixed(a, b)) return mixed_operands("cudal2.matmul", "a", a, "b", b, [&] { return at::matmul(a, b); });
  check_inner_dims("cudal2.matmul", a, RightOperand{b, false});
  if (!takes_tuned_path(a)) return torch_matmul();
  c10::cuda::CUDAGuard guard(a.device());
  RoutedOperands operands;
  Route route = route_or_copy(a, RightOperand{b, false}, nullptr, operands);
  if (!route.ours) return torch_matmul();
  at::Tensor out = empty_output(a, route.args.n);
  if (dispatch_into(route, out)) return out;
  warn_torch_runs(route.args);
  return torch_matmul();
}

at::Tensor& matmul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const auto torch_matmul_out = [&]() -> at::Tensor& { return run_torch("cudal2.matmul", "a", a, "b", b, nullptr,
      [&]() -> at::Tensor& { return at::matmul_out(out, a, b); }); };
  const bool fits = a.dim() >= 2 && b.dim() == 2 && takes_tuned_path(a) && out.device() == a.device() &&
                    out.scalar_type() == a.scalar_type() && a.size(-1) == b.size(0) &&
                    out.sizes() == c10::IntArrayRef(output_sizes(a, b.size(1))) &&
                    // An out sharing memory with an input, or with itself, is torch's to handle (or reject).
                    !out.is_alias_of(a) && !out.is_alias_of(b) && at::has_internal_overlap(out) != at::MemOverlap::Yes;
  if (!fits) return torch_matmul_out();  // torch's own checks, resizing and errors
  if (output_misaligned(out)) return out.copy_(cudal2::matmul(a, b));  // the aligned path, then one copy
  check_same_device_and_dtype("cudal2.matmul", "a", a, "b", b);
  c10::cuda::CUDAGuard guard(a.device());
  RoutedOperands operands;
  Route route = route_or_copy(a, RightOperand{b, false}, nullptr, operands);
  if (!route.ours) return torch_matmul_out();
  if (!dispatch_into(route, out)) {
    warn_torch_runs(route.args);
    return torch_matmul_out();
  }
  return out;
}

namespace {

// A linear the tuned path takes (CUDA fp16/bf16, x [..., K], weight [N, K], bias absent or fused), routed; or a Route
// that is not ours when torch must run it. `operands` keeps what the GEMM reads alive.
Route route_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor* bias, RoutedOperands& operands) {
  Route not_ours;
  if (x.dim() < 2 || weight.dim() != 2) return not_ours;
  check_same_device_and_dtype("cudal2.linear", "input", x, "weight", weight);
  check_inner_dims("cudal2.linear", x, RightOperand{weight, true});
  const int64_t n = weight.size(0);
  const BiasForm form = classify_bias(bias, x, n);
  if (!takes_tuned_path(x) || form == BiasForm::kTorch) return not_ours;
  if (form == BiasForm::kNone) return route_or_copy(x, RightOperand{weight, true}, nullptr, operands);
  const at::Tensor vector = fused_bias_vector(*bias, n);
  return route_or_copy(x, RightOperand{weight, true}, &vector, operands);
}

at::Tensor torch_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return run_torch("cudal2.linear", "input", x, "weight", weight, bias_or_null(bias),
                   [&] { return at::linear(x, weight, bias); });
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  if (x.dim() >= 2 && weight.dim() == 2 && mixed(x, weight)) {
    return mixed_operands("cudal2.linear", "input", x, "weight", weight, [&] { return at::linear(x, weight, bias); });
  }
  c10::cuda::OptionalCUDAGuard guard(x.is_cuda() ? std::optional<c10::Device>(x.device()) : std::nullopt);
  RoutedOperands operands;
  Route route = route_linear(x, weight, bias_or_null(bias), operands);
  if (!route.ours) return torch_linear(x, weight, bias);
  at::Tensor out = empty_output(x, route.args.n);
  if (dispatch_into(route, out)) return out;
  warn_torch_runs(route.args);
  return torch_linear(x, weight, bias);
}

at::Tensor& linear_out(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::Tensor& out) {
  const at::Tensor* bias_ptr = bias_or_null(bias);
  const bool fits = x.dim() >= 2 && weight.dim() == 2 && takes_tuned_path(x) && out.device() == x.device() &&
                    out.scalar_type() == x.scalar_type() && x.size(-1) == weight.size(1) &&
                    out.sizes() == c10::IntArrayRef(output_sizes(x, weight.size(0))) && !output_misaligned(out) &&
                    !out.is_alias_of(x) && !out.is_alias_of(weight) && !(bias_ptr && out.is_alias_of(*bias_ptr));
  if (!fits) return out.copy_(cudal2::linear(x, weight, bias));  // linear's own checks, fallbacks and errors
  c10::cuda::CUDAGuard guard(x.device());
  RoutedOperands operands;
  Route route = route_linear(x, weight, bias_ptr, operands);
  if (route.ours && dispatch_into(route, out)) return out;
  if (route.ours) warn_torch_runs(route.args);
  return out.copy_(torch_linear(x, weight, bias));
}

}  // namespace cudal2
