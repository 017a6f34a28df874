// Python bindings of the extension `cudal2_ops._C`: op registration (torch.ops.cudal2.*), the eager fast path,
// kernel libraries, tables, configuration, introspection and low-level entry points for tests and benchmarks.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <chrono>

#include "baselines_cublas.h"
#include "cublaslt_gemm.h"
#include "dispatch.h"
#include "eager_entry.h"
#include "gemm_ops.h"
#include "gemm_route.h"
#include "kernel_registry.h"

namespace cudal2 {
namespace {

// explain() and time_linear_stages() decide for a call whose output is not allocated yet: they stand in this
// address for the fresh [M, N] output the call would allocate (16-byte aligned, ldd = N). Kernels' can_implement never
// dereferences it.
void assume_fresh_output(GemmArgs& g) {
  g.d = reinterpret_cast<void*>(uintptr_t{4096});
  g.ldd = g.n;
}

// Runs an entry with C++ warnings (TORCH_WARN, e.g. torch resizing an out= tensor) raised as Python warnings, as
// torch's own bindings do; otherwise they print to stderr, out of reach of Python's warning filters.
template <typename Entry>
at::Tensor with_python_warnings(Entry&& entry) {
  torch::PyWarningHandler handler;
  try {
    return entry();
  } catch (...) {
    handler.set_in_exception();  // the warnings are still raised; the exception propagates unchanged
    throw;
  }
}

cudal2_layout parse_layout(const std::string& layout) {
  TORCH_CHECK(layout == "nn" || layout == "nt", "layout must be 'nn' (b is [K, N]) or 'nt' (b is [N, K]), got '",
              layout, "'");
  return layout == "nt" ? CUDAL2_NT : CUDAL2_NN;
}

// Routes (a, b in `layout`, bias) into `out` for the low-level entry points, which accept only routable tensors.
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

void cublaslt_matmul(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias, at::Tensor& out,
                     const std::string& layout, const std::string& policy) {
  TORCH_CHECK(policy == "heuristic" || policy == "autotune", "policy must be 'heuristic' or 'autotune', got '", policy,
              "'");
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 cublaslt_matmul", a, b, bias, out, layout);
  const GemmArgs& g = route.args;
  const bool ok = CublasLtGemm::instance().run(
      g, policy == "autotune" ? LtPolicy::kAutotune : LtPolicy::kHeuristic, workspace_for(g.device, g.stream));
  TORCH_CHECK(ok, "cudal2 cublaslt_matmul: cuBLASLt has no algorithm for this problem");
}

void run_kernel(const std::string& name, const at::Tensor& a, const at::Tensor& b,
                const std::optional<at::Tensor>& bias, at::Tensor& out, const std::string& layout, int splits,
                int swizzle, int raster) {
  const cudal2_kernel* kernel = KernelRegistry::instance().find(name);
  TORCH_CHECK(kernel != nullptr, "cudal2 run_kernel: no kernel named '", name, "' is loaded");
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 run_kernel", a, b, bias, out, layout);
  const GemmArgs& g = route.args;
  const cudal2_problem p = make_problem(g, TableEntry{kernel, splits, swizzle, raster}, workspace_for(g.device, g.stream),
                                        at::cuda::getDeviceProperties(g.device)->multiProcessorCount);
  const cudal2_status status = kernel->launch(&p);
  TORCH_CHECK(status == CUDAL2_OK, "cudal2 run_kernel: kernel ", name, " returned status ", static_cast<int>(status),
              " for M=", g.m, " N=", g.n, " K=", g.k, " (1 unsupported, 2 workspace, 3 launch failed, 4 bad argument)");
}

// Which path a call would take, and why (no GPU work except cuBLASLt's host-side heuristic query). Validates the
// operands as the call would: what torch rejects for every input raises the call's error.
pybind11::dict explain(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                       const std::string& layout) {
  pybind11::dict out;
  const RightOperand b_op{b, parse_layout(layout) == CUDAL2_NT};
  const char* op = b_op.nk ? "cudal2.linear" : "cudal2.matmul";
  check_same_device_and_dtype(op, "a", a, "b", b);
  if (a.dim() >= 2 && b.dim() == 2) {
    TORCH_CHECK(a.size(-1) == b_op.k(), op, ": a ", a.sizes(), " has K=", a.size(-1), " but b ", b.sizes(), " has K=",
                b_op.k(), " (layout '", layout, "': b is ", b_op.nk ? "[N, K])" : "[K, N])");
  }
  const at::Tensor* bias_ptr = bias_or_null(bias);
  at::Tensor fused_bias;
  if (bias_ptr != nullptr && b.dim() == 2) {
    if (classify_bias(bias_ptr, a, b_op.n()) == BiasForm::kTorch) {
      out["path"] = "torch";
      out["reason"] = c10::str("bias ", bias_ptr->sizes(), " (", bias_ptr->scalar_type(), ", ", bias_ptr->device(),
                               ") is not fused (fused: [N], [1, N], [1] or 0-d of the input's dtype and device); "
                               "torch broadcasts it");
      return out;
    }
    fused_bias = fused_bias_vector(*bias_ptr, b_op.n());
    bias_ptr = &fused_bias;
  }
  c10::cuda::OptionalCUDAGuard guard(a.is_cuda() ? std::optional<c10::Device>(a.device()) : std::nullopt);
  RoutedOperands operands;
  Route route = route_or_copy(a, b_op, bias_ptr, operands);
  if (!route.ours) {
    out["path"] = "torch";
    out["reason"] = route.torch_reason;
    return out;
  }
  out["copies_operands"] = !operands.a.is_same(a) || !operands.b.is_same(b);
  GemmArgs& g = route.args;
  assume_fresh_output(g);
  out["layout"] = g.layout == CUDAL2_NT ? "nt" : "nn";
  out["dtype"] = g.dtype == CUDAL2_BF16 ? "bf16" : "fp16";
  out["m"] = g.m;
  out["n"] = g.n;
  out["k"] = g.k;
  const Decision d = Dispatcher::instance().decide(g);
  out["reason"] = d.reason;
  if (d.tuned_m >= 0) out["tuned_m"] = d.tuned_m;
  if (d.path == Path::kKernel) {
    out["path"] = "kernel";
    out["kernel"] = d.entry.kernel->name;
    out["family"] = d.entry.kernel->family;
    out["splits"] = d.entry.splits;
    out["swizzle"] = d.entry.swizzle;
    out["raster"] = d.entry.raster;
    return out;
  }
  const LtChoice lt = CublasLtGemm::instance().describe(g);
  out["path"] = lt.available ? "cublaslt" : "torch";
  out["cublaslt_policy"] = d.lt_policy == LtPolicy::kAutotune ? "autotune" : (lt.tuned ? "tuned" : "heuristic");
  out["cublaslt_candidate"] = lt.candidate_index;
  out["cublaslt_candidates"] = lt.candidate_count;
  out["cublaslt_tuned_us"] = lt.tuned_us;
  out["cublaslt_split_k"] = lt.split_k;
  out["cublaslt_reduction_scheme"] = lt.reduction_scheme;
  if (!lt.available) out["reason"] = std::string(d.reason) + "; cuBLASLt has no algorithm, torch runs it";
  return out;
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

// entries: (layout, dtype, m, n, k, kernel name, splits, swizzle, raster). Returns the names of kernels not loaded.
std::vector<std::string> set_table(int device, const std::vector<std::tuple<std::string, std::string, int64_t, int64_t,
                                                                             int64_t, std::string, int, int, int>>& rows,
                                   bool nearest_m_up) {
  std::vector<std::pair<ShapeKey, TableEntry>> entries;
  std::vector<std::string> missing;
  for (const auto& [layout, dtype, m, n, k, name, splits, swizzle, raster] : rows) {
    const cudal2_kernel* kernel = KernelRegistry::instance().find(name);
    if (kernel == nullptr) {
      missing.push_back(name);
      continue;
    }
    TORCH_CHECK(dtype == "fp16" || dtype == "bf16", "table dtype must be fp16 or bf16, got ", dtype);
    entries.push_back({ShapeKey{parse_layout(layout), dtype == "bf16" ? CUDAL2_BF16 : CUDAL2_FP16, m, n, k},
                       TableEntry{kernel, splits, swizzle, raster}});
  }
  Dispatcher::instance().set_table(device, entries, nearest_m_up);
  return missing;
}

pybind11::dict kernel_info(const std::string& name) {
  const cudal2_kernel* k = KernelRegistry::instance().find(name);
  TORCH_CHECK(k != nullptr, "no kernel named '", name, "' is loaded");
  pybind11::dict d;
  d["name"] = k->name;
  d["family"] = k->family;
  d["sm_min"] = k->sm_min;
  d["sm_max"] = k->sm_max;
  d["dtype"] = k->dtype == CUDAL2_BF16 ? "bf16" : "fp16";
  d["layout"] = k->layout == CUDAL2_NT ? "nt" : "nn";
  d["has_bias"] = static_cast<bool>(k->has_bias);
  return d;
}

}  // namespace
}  // namespace cudal2

TORCH_LIBRARY(cudal2, m) {
  m.set_python_module("cudal2_ops.ops");
  m.def("matmul(Tensor a, Tensor b) -> Tensor");
  m.def("matmul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor");
}

// The same entry points serve CPU (they defer to torch there) and CUDA; fake kernels are in Python (cudal2_ops/ops.py),
// autograd kernels in autograd.cpp.
TORCH_LIBRARY_IMPL(cudal2, CPU, m) {
  m.impl("matmul", &cudal2::matmul);
  m.impl("matmul.out", &cudal2::matmul_out);
  m.impl("linear", &cudal2::linear);
}

TORCH_LIBRARY_IMPL(cudal2, CUDA, m) {
  m.impl("matmul", &cudal2::matmul);
  m.impl("matmul.out", &cudal2::matmul_out);
  m.impl("linear", &cudal2::linear);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace cudal2;
  m.doc() = "cudal2 compiled extension: dispatcher, cuBLASLt fallback, kernel registry";
  m.def("matmul", [](const at::Tensor& a, const at::Tensor& b) {
    return with_python_warnings([&] { return matmul_entry(a, b); });
  }, pybind11::arg("a"), pybind11::arg("b"),
        "cudal2.matmul for eager calls (the op's kernel directly unless the dispatcher must see the call).");
  m.def("matmul_out", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    return with_python_warnings([&] { return matmul_out_entry(a, b, out); });
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("out"),
        "cudal2.matmul(a, b, out=out) for eager and compiled calls.");
  m.def("linear", [](const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
    return with_python_warnings([&] { return linear_entry(x, weight, bias); });
  }, pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias") = pybind11::none(),
        "cudal2.linear for eager calls (the op's kernel directly unless the dispatcher must see the call).");
  m.def("direct_call_allowed", [](const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias) {
    return direct_call_allowed(a, b, bias_or_null(bias));
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias") = pybind11::none(),
        "Whether _C.matmul/linear would skip the dispatcher for these tensors in the current thread state.");
  m.def("linear_out", [](const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                         at::Tensor& out) {
    return with_python_warnings([&] { return linear_out_entry(x, weight, bias, out); });
  }, pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("bias") = pybind11::none(), pybind11::kw_only(), pybind11::arg("out"),
        "cudal2.linear into out= for compiled code (below autograd).");
  m.def("load_kernel_library", [](const std::string& path) { return KernelRegistry::instance().load_library(path); },
        "Loads a kernel library (.so); returns the number of kernels added.");
  m.def("kernel_names", [] { return KernelRegistry::instance().names(); });
  m.def("kernel_libraries", [] { return KernelRegistry::instance().libraries(); });
  m.def("kernel_info", &kernel_info);
  m.def("set_table", &set_table, "Installs a device's table; returns the kernel names that are not loaded.");
  m.def("set_table_loader", [](pybind11::function loader) {
    // The dispatcher is never destroyed, so the Python callable it holds is never released after finalisation.
    auto* held = new pybind11::function(std::move(loader));
    Dispatcher::instance().set_table_loader([held](int device) {
      pybind11::gil_scoped_acquire gil;
      try {
        (*held)(device);
      } catch (pybind11::error_already_set& e) {
        PyErr_WarnEx(PyExc_RuntimeWarning, (std::string("cudal2: loading the table failed: ") + e.what()).c_str(), 1);
      }
    });
  });
  m.def("table_size", [](int device) { return Dispatcher::instance().table_size(device); });
  m.def("set_config", [](bool kernels_enabled, bool tuning, bool print_configs) {
    Dispatcher::instance().set_config(DispatchConfig{kernels_enabled, tuning, print_configs});
  });
  m.def("get_config", [] {
    const DispatchConfig c = Dispatcher::instance().config();
    return std::make_tuple(c.kernels_enabled, c.tuning, c.print_configs);
  });
  m.def("explain", &explain, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"), pybind11::arg("layout"));
  m.def("time_linear_stages", &time_linear_stages, pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("iters"), "Host ns per call of each stage of an eager linear (benchmarks.api_latency).");
  m.def("cublaslt_matmul", &cublaslt_matmul, "cuBLASLt with the top heuristic or the autotuned algorithm.");
  m.def("run_kernel", &run_kernel, "Runs one loaded kernel by name (tests, search).");
  m.def("tuned_records", [] {
    std::vector<std::tuple<std::string, std::string, float>> out;
    for (const auto& r : CublasLtGemm::instance().tuned_records()) out.emplace_back(r.key, r.algo_hex, r.us);
    return out;
  });
  m.def("add_known_algo", [](const std::string& key, const std::string& algo_hex) {
    CublasLtGemm::instance().add_known_algo(key, algo_hex);
  });
  m.def("cublaslt_version", [] { return static_cast<int64_t>(cublasLtGetVersion()); });
  register_cublas_baseline(m);
}
