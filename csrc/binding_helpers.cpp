// Helpers shared by the binding files.
#include "binding_helpers.h"

#include <c10/util/Exception.h>

namespace cudal2 {

void assume_fresh_output(GemmArgs& g) {
  g.d = reinterpret_cast<void*>(uintptr_t{4096});
  g.ldd = g.n;
}

cudal2_layout parse_layout(const std::string& layout) {
  TORCH_CHECK(layout == "nn" || layout == "nt", "layout must be 'nn' (b is [K, N]) or 'nt' (b is [N, K]), got '",
              layout, "'");
  return layout == "nt" ? CUDAL2_NT : CUDAL2_NN;
}

Route route_low_level(const char* what, const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                      const at::Tensor& out, const std::string& layout) {
  const RightOperand b_op{b, parse_layout(layout) == CUDAL2_NT};
  check_same_device_and_dtype(what, "a", a, "b", b);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b_op.k(), what, ": need a [M, K] and b [K, N] (nn) "
              "or [N, K] (nt); got ", a.sizes(), " and ", b.sizes(), " with layout ", layout);
  TORCH_CHECK(out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b_op.n() &&
              out.scalar_type() == a.scalar_type() && out.device() == a.device(), what, ": out must be [M, N] = [",
              a.size(0), ", ", b_op.n(), "] of dtype ", a.scalar_type(), " on ", a.device(), ", got ", out.sizes());
  Route route = route_gemm(a, b_op, bias_or_null(bias), &out);
  TORCH_CHECK(route.ours, what, ": these tensors cannot take the tuned path: ", route.torch_reason);
  return route;
}

}  // namespace cudal2
