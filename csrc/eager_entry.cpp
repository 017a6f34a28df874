// Eager entries of the GEMM ops: a direct call of the op's kernel when nothing needs to see the call in the
// dispatcher (the common inference case: no dispatch key computation, no boxed or unboxed dispatcher hop), else the
// registered op (autograd when a gradient is needed, TorchDispatchMode, tensor subclasses, functorch, tracing).
#include "eager_entry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <vector>

#include "gemm_ops.h"
#include "gemm_route.h"

namespace cudal2 {
namespace {

bool needs_grad(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias) {
  return at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad() || (bias && bias->requires_grad()));
}

// Every dispatch key a plain strided CPU or CUDA tensor carries: its backend, autograd, ADInplaceOrView, autocast.
const c10::DispatchKeySet& plain_tensor_keys() {
  static const c10::DispatchKeySet keys = [] {
    c10::DispatchKeySet ks(c10::DispatchKey::CPU);
    ks = ks | c10::DispatchKeySet(c10::DispatchKey::CUDA);
    for (const auto backend : {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit}) {
      ks = ks | c10::getAutogradRelatedKeySetFromBackend(backend) | c10::getAutocastRelatedKeySetFromBackend(backend);
    }
    return ks;
  }();
  return keys;
}

bool plain_tensor(const at::Tensor& t) { return (t.key_set() | plain_tensor_keys()) == plain_tensor_keys(); }

}  // namespace

bool direct_call_allowed(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias) {
  if (needs_grad(a, b, bias) || !plain_tensor(a) || !plain_tensor(b) || (bias && !plain_tensor(*bias))) return false;
  // Thread-local keys beyond the defaults (BackendSelect, ADInplaceOrView; inference mode drops the latter) mean a
  // mode, functionalization, functorch or the jit tracer wants to see the op.
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return (tls.included_ | c10::default_included_set) == c10::default_included_set &&
         !c10::impl::TorchDispatchModeTLS::any_modes_set();
}

at::Tensor linear_entry(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  const at::Tensor* bias_ptr = bias_or_null(bias);
  if (direct_call_allowed(x, weight, bias_ptr)) {
    RECORD_FUNCTION("cudal2::linear", std::vector<c10::IValue>({x, weight}));
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // as the op's kernel runs when dispatched
    return cudal2::linear(x, weight, bias);
  }
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("cudal2::linear", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  if (needs_grad(x, weight, bias_ptr)) return op.call(x, weight, bias);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, weight, bias);
}

at::Tensor matmul_entry(const at::Tensor& a, const at::Tensor& b) {
  if (direct_call_allowed(a, b, nullptr)) {
    RECORD_FUNCTION("cudal2::matmul", std::vector<c10::IValue>({a, b}));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return cudal2::matmul(a, b);
  }
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("cudal2::matmul", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&)>();
  if (needs_grad(a, b, nullptr)) return op.call(a, b);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(a, b);
}

at::Tensor matmul_out_entry(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  if (direct_call_allowed(a, b, &out)) {
    RECORD_FUNCTION("cudal2::matmul", std::vector<c10::IValue>({a, b}));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return cudal2::matmul_out(a, b, out);
  }
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("cudal2::matmul", "out").typed<at::Tensor&(
      const at::Tensor&, const at::Tensor&, at::Tensor&)>();
  if (needs_grad(a, b, nullptr)) return op.call(a, b, out);  // autograd rejects out= as torch does
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(a, b, out);
}

at::Tensor& linear_out_entry(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::Tensor& out) {
  RECORD_FUNCTION("cudal2::linear", std::vector<c10::IValue>({x, weight}));
  return cudal2::linear_out(x, weight, bias, out);
}

}  // namespace cudal2
