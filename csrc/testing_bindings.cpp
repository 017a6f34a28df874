// `cudal2_ops._C.testing`: entry points for tests and benchmarks, apart from the user ops: the cuBLASLt baselines
// (a separate cuBLASLt instance with its own handles, plans and tuning: nothing a baseline tunes reaches the
// dispatcher), the cuBLAS baseline and the eager linear's stage timer.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <chrono>

#include "baselines_cublas.h"
#include "binding_helpers.h"
#include "cublaslt_gemm.h"
#include "dispatch.h"
#include "eager_entry.h"
#include "tuning_bindings.h"

namespace cudal2 {
namespace {

void cublaslt_matmul(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias, at::Tensor& out,
                     const std::string& layout, const std::string& policy) {
  TORCH_CHECK(policy == "heuristic" || policy == "autotune", "policy must be 'heuristic' or 'autotune', got '", policy,
              "'");
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 cublaslt_matmul", a, b, bias, out, layout);
  const GemmArgs& g = route.args;
  const bool ok = CublasLtGemm::baseline().run(
      g, policy == "autotune" ? LtPolicy::kAutotune : LtPolicy::kHeuristic, workspace_for(g.device, g.stream));
  TORCH_CHECK(ok, "cudal2 cublaslt_matmul: cuBLASLt has no algorithm for this problem");
}

// Host nanoseconds per call of each stage of an eager linear (no bias) as `linear_entry` runs it, averaged over
// `iters` calls of each stage alone: `direct_check` (may the call skip the dispatcher), `route` (validation, strides,
// alignment), `decide` (the decision of a repeated problem, cuBLASLt plan lookup, workspace), `allocate` (the output),
// and `call` (the whole C++ entry, launch included). `call` less the others is the launch; the Python wrapper and the
// binding entry are what a Python-level timing adds.
pybind11::dict time_linear_stages(const at::Tensor& x, const at::Tensor& weight, int iters) {
  c10::cuda::CUDAGuard guard(x.device());
  const RightOperand w{weight, true};
  RoutedOperands operands;
  Route route = route_or_copy(x, w, nullptr, operands);
  TORCH_CHECK(route.ours, "time_linear_stages: tensors cannot take the tuned path: ", route.torch_reason);
  TORCH_CHECK(operands.a.is_same(x) && operands.b.is_same(weight), "time_linear_stages: operands need staging "
              "copies; pass contiguous, 16-byte aligned tensors");
  const auto per_call_ns = [iters](auto&& stage) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) stage();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           std::max(iters, 1);
  };
  pybind11::dict out;
  out["direct_check"] = per_call_ns([&] { (void)direct_call_allowed(x, weight, nullptr); });
  out["route"] = per_call_ns([&] { (void)route_or_copy(x, w, nullptr, operands); });
  out["decide"] = per_call_ns([&] {
    GemmArgs g = route.args;
    assume_fresh_output(g);
    int sm_count = 0;
    const Decision& d = Dispatcher::instance().cached_decision(g, &sm_count);
    if (d.path == Path::kCublasLt) (void)CublasLtGemm::instance().plan(g);
    (void)workspace_for(g.device, g.stream);
  });
  out["allocate"] = per_call_ns([&] {
    (void)at::detail::empty_cuda({route.args.m, route.args.n}, x.scalar_type(), x.device(), std::nullopt);
  });
  out["call"] = per_call_ns([&] { (void)linear_entry(x, weight, std::nullopt); });
  return out;
}

}  // namespace

void register_testing_bindings(pybind11::module_& m) {
  m.doc() = "Entry points for tests and benchmarks (baselines, stage timers); not part of the user API.";
  m.def("time_linear_stages", &time_linear_stages, pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("iters"), "Host ns per call of each stage of an eager linear (benchmarks.api_latency).");
  m.def("cublaslt_matmul", &cublaslt_matmul, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"),
        pybind11::arg("out"), pybind11::arg("layout"), pybind11::arg("policy"),
        "Baseline: cuBLASLt with the top heuristic or the autotuned algorithm, on the baseline instance.");
  m.def("cublaslt_candidates", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& layout) {
    return lt_candidates_on(CublasLtGemm::baseline(), a, b, out, layout);
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("out"), pybind11::arg("layout"),
        "Baseline: cuBLASLt's heuristic candidates (configuration fields, best first) on the baseline instance.");
  m.def("cublaslt_run_config", [](const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                                  at::Tensor& out, const std::string& layout, const std::vector<int64_t>& config) {
    run_lt_config_on(CublasLtGemm::baseline(), a, b, bias, out, layout, config);
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"), pybind11::arg("out"), pybind11::arg("layout"),
        pybind11::arg("config"), "Baseline: cuBLASLt with exactly this configuration, on the baseline instance.");
  register_cublas_baseline(m);
}

}  // namespace cudal2
