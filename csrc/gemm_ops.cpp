// GEMM entry points: validate, route, dispatch; torch runs whatever the dispatcher cannot.
#include "gemm_ops.h"

#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAGuard.h>

#include "dispatch.h"
#include "gemm_route.h"

namespace cudal2 {
namespace {

std::vector<int64_t> output_sizes(const at::Tensor& a, int64_t n) {
  std::vector<int64_t> sizes(a.sizes().begin(), a.sizes().end());
  sizes.back() = n;
  return sizes;
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

}  // namespace

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() < 2 || b.dim() != 2) return at::matmul(a, b);
  check_gemm_inputs("cudal2.matmul", a, b, nullptr);
  TORCH_CHECK(a.size(-1) == b.size(0), "cudal2.matmul: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied (a's last dim ", a.size(-1), " must equal b's first dim ", b.size(0), ")");
  c10::cuda::OptionalCUDAGuard guard(a.is_cuda() ? std::optional<c10::Device>(a.device()) : std::nullopt);
  std::vector<at::Tensor> copies;
  Route route = route_or_copy(a, b, nullptr, copies);
  if (!route.ours) return at::matmul(a, b);
  at::Tensor out = at::empty(output_sizes(a, route.args.n), a.options());
  if (dispatch_into(route, out)) return out;
  warn_torch_runs(route.args);
  return at::matmul(a, b);
}

at::Tensor& matmul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const bool fits = a.dim() >= 2 && b.dim() == 2 && takes_tuned_path(a) && out.device() == a.device() &&
                    out.scalar_type() == a.scalar_type() && a.size(-1) == b.size(0) &&
                    out.sizes() == c10::IntArrayRef(output_sizes(a, b.size(1))) &&
                    // An out sharing memory with an input, or with itself, is torch's to handle (or reject).
                    !out.is_alias_of(a) && !out.is_alias_of(b) && at::has_internal_overlap(out) != at::MemOverlap::Yes;
  if (!fits) return at::matmul_out(out, a, b);  // torch's own checks, resizing and errors
  if (output_misaligned(out)) return out.copy_(cudal2::matmul(a, b));  // the aligned path, then one copy
  check_gemm_inputs("cudal2.matmul", a, b, nullptr);
  c10::cuda::OptionalCUDAGuard guard(a.is_cuda() ? std::optional<c10::Device>(a.device()) : std::nullopt);
  std::vector<at::Tensor> copies;
  Route route = route_or_copy(a, b, nullptr, copies);
  if (!route.ours) return at::matmul_out(out, a, b);
  if (!dispatch_into(route, out)) {
    warn_torch_runs(route.args);
    return at::matmul_out(out, a, b);
  }
  return out;
}

namespace {

// F.linear's shape checks for a routable call (x [..., K] with x.dim() >= 2, weight [N, K], bias [N] or none).
void check_linear_inputs(const at::Tensor& x, const at::Tensor& weight, const at::Tensor* bias) {
  check_gemm_inputs("cudal2.linear", x, weight, bias);
  TORCH_CHECK(x.size(-1) == weight.size(1), "cudal2.linear: input ", x.sizes(), " has ", x.size(-1),
              " features but weight ", weight.sizes(), " expects ", weight.size(1), " (weight is [N, K])");
  if (bias != nullptr) {
    TORCH_CHECK(bias->numel() == weight.size(0), "cudal2.linear: bias has ", bias->numel(),
                " elements but weight ", weight.sizes(), " has N=", weight.size(0), " outputs");
  }
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  if (x.dim() < 2 || weight.dim() != 2) return at::linear(x, weight, bias);
  const at::Tensor* bias_ptr = bias_or_null(bias);
  check_linear_inputs(x, weight, bias_ptr);
  c10::cuda::OptionalCUDAGuard guard(x.is_cuda() ? std::optional<c10::Device>(x.device()) : std::nullopt);
  std::vector<at::Tensor> copies;
  Route route = route_or_copy(x, weight.t(), bias_ptr, copies);
  if (!route.ours) return at::linear(x, weight, bias);
  at::Tensor out = at::empty(output_sizes(x, route.args.n), x.options());
  if (dispatch_into(route, out)) return out;
  warn_torch_runs(route.args);
  return at::linear(x, weight, bias);
}

at::Tensor& linear_out(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::Tensor& out) {
  const at::Tensor* bias_ptr = bias_or_null(bias);
  const bool fits = x.dim() >= 2 && weight.dim() == 2 && takes_tuned_path(x) && out.device() == x.device() &&
                    out.scalar_type() == x.scalar_type() && x.size(-1) == weight.size(1) &&
                    out.sizes() == c10::IntArrayRef(output_sizes(x, weight.size(0))) && !output_misaligned(out) &&
                    !out.is_alias_of(x) && !out.is_alias_of(weight) && !(bias_ptr && out.is_alias_of(*bias_ptr));
  if (!fits) return out.copy_(cudal2::linear(x, weight, bias));  // linear's own checks, fallbacks and errors
  check_linear_inputs(x, weight, bias_ptr);
  c10::cuda::OptionalCUDAGuard guard(x.device());
  std::vector<at::Tensor> copies;
  Route route = route_or_copy(x, weight.t(), bias_ptr, copies);
  if (route.ours && dispatch_into(route, out)) return out;
  if (route.ours) warn_torch_runs(route.args);
  return out.copy_(at::linear(x, weight, bias));
}

}  // namespace cudal2
