// Python bindings of the extension `cudal2_ops._C`: op registration (torch.ops.cudal2.*), the eager fast path,
// kernel libraries, tables, configuration and introspection. The tuner's entry points are in `_C.tuning`
// (tuning_bindings.cpp), those of tests and benchmarks in `_C.testing` (testing_bindings.cpp).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>
#include <torch/library.h>

#include "binding_helpers.h"
#include "cublaslt_gemm.h"
#include "dispatch.h"
#include "eager_entry.h"
#include "gemm_ops.h"
#include "gemm_route.h"
#include "kernel_registry.h"
#include "tuning_bindings.h"

namespace cudal2 {
namespace {

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
  out["reason"] = d.tuned_m >= 0 ? c10::str(d.reason, ": M=", d.tuned_m) : std::string(d.reason);
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
  const LtChoice lt = CublasLtGemm::instance().describe(g, d.entry.has_lt ? &d.entry.lt : nullptr);
  out["path"] = lt.available ? "cublaslt" : "torch";
  out["cublaslt_policy"] = std::string(lt.source) == "table" ? "table"
                           : d.lt_policy == LtPolicy::kAutotune ? "autotune" : (lt.tuned ? "tuned" : "heuristic");
  out["cublaslt_config"] = lt.config;
  if (std::string(lt.source) == "table") {
    out["cublaslt_near_ties"] = d.entry.lt.rival_count;
    out["cublaslt_near_tie_pick"] = lt.table_confirmed ? lt.table_pick : -1;
  }
  out["cublaslt_candidate"] = lt.candidate_index;
  out["cublaslt_candidates"] = lt.candidate_count;
  out["cublaslt_tuned_us"] = lt.tuned_us;
  out["cublaslt_split_k"] = lt.split_k;
  out["cublaslt_reduction_scheme"] = lt.reduction_scheme;
  if (!lt.available) out["reason"] = std::string(d.reason) + "; cuBLASLt has no algorithm, torch runs it";
  return out;
}

// The rules of a table header; `lt_scope` (rules.nearest_m_cublaslt) names the M classes the nearest-M cuBLASLt rule
// serves, as cudal2_ops.tables.LT_RULE_SCOPES does.
TableRules table_rules(bool nearest_m_up, const std::string& lt_scope) {
  TableRules rules;
  rules.nearest_m_up = nearest_m_up;
  rules.nearest_m_cublaslt_aligned = lt_scope == "aligned_m" || lt_scope == "all";
  rules.nearest_m_cublaslt_unaligned = lt_scope == "unaligned_m" || lt_scope == "all";
  TORCH_CHECK(lt_scope == "off" || rules.nearest_m_cublaslt_aligned || rules.nearest_m_cublaslt_unaligned,
              "set_table: nearest_m_cublaslt must be 'off', 'unaligned_m', 'aligned_m' or 'all', got '", lt_scope, "'");
  return rules;
}

// rows: (layout, dtype, m, n, k, kernel name or "" for none, splits, swizzle, raster, cuBLASLt configuration fields
// or [] for none, its near-ties' fields (fastest first; those past LtTableChoice::kMaxRivals are dropped)). Returns the
// names of kernels not loaded (their rows keep only their cuBLASLt choice).
using TableRow = std::tuple<std::string, std::string, int64_t, int64_t, int64_t, std::string, int, int, int,
                            std::vector<int64_t>, std::vector<std::vector<int64_t>>>;
std::vector<std::string> set_table(int device, const std::vector<TableRow>& rows, bool nearest_m_up,
                                   const std::string& nearest_m_cublaslt) {
  const TableRules rules = table_rules(nearest_m_up, nearest_m_cublaslt);
  std::vector<std::pair<ShapeKey, TableEntry>> entries;
  std::vector<std::string> missing;
  for (const auto& [layout, dtype, m, n, k, name, splits, swizzle, raster, lt, near_ties] : rows) {
    TORCH_CHECK(dtype == "fp16" || dtype == "bf16", "table dtype must be fp16 or bf16, got ", dtype);
    TableEntry e;
    if (!name.empty()) {
      e.kernel = KernelRegistry::instance().find(name);
      if (e.kernel == nullptr) missing.push_back(name);
      e.splits = splits;
      e.swizzle = swizzle;
      e.raster = raster;
    }
    if (!lt.empty()) {
      e.has_lt = true;
      e.lt.config = config_from(lt);
      for (const auto& tie : near_ties) {
        if (e.lt.rival_count == LtTableChoice::kMaxRivals) break;
        e.lt.rivals[e.lt.rival_count++] = config_from(tie);
      }
    }
    if (e.kernel == nullptr && !e.has_lt) continue;
    entries.push_back({ShapeKey{parse_layout(layout), dtype == "bf16" ? CUDAL2_BF16 : CUDAL2_FP16, m, n, k}, e});
  }
  Dispatcher::instance().set_table(device, entries, rules);
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
  m.def("set_table", &set_table, pybind11::arg("device"), pybind11::arg("rows"), pybind11::arg("nearest_m_up"),
        pybind11::arg("nearest_m_cublaslt"),
        "Installs a device's table with its rules (nearest_m_cublaslt: 'off', 'unaligned_m', 'aligned_m' or 'all'); "
        "returns the kernel names that are not loaded.");
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
  m.def("set_config", [](bool kernels_enabled, bool tuning, bool print_configs, bool confirm_near_ties) {
    Dispatcher::instance().set_config(DispatchConfig{kernels_enabled, tuning, print_configs, confirm_near_ties});
  }, pybind11::arg("kernels_enabled"), pybind11::arg("tuning"), pybind11::arg("print_configs"),
        pybind11::arg("confirm_near_ties") = false);
  m.def("get_config", [] {
    const DispatchConfig c = Dispatcher::instance().config();
    return std::make_tuple(c.kernels_enabled, c.tuning, c.print_configs, c.confirm_near_ties);
  });
  m.def("explain", &explain, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"), pybind11::arg("layout"));
  m.def("tuned_records", [] {
    std::vector<std::tuple<std::string, std::string, float>> out;
    for (const auto& r : CublasLtGemm::instance().tuned_records()) out.emplace_back(r.key, r.algo_hex, r.us);
    return out;
  });
  m.def("add_known_algo", [](const std::string& key, const std::string& algo_hex) {
    CublasLtGemm::instance().add_known_algo(key, algo_hex);
  });
  m.def("cublaslt_version", [] { return static_cast<int64_t>(cublasLtGetVersion()); });
  auto tuning = m.def_submodule("tuning");
  register_tuning_bindings(tuning);
  auto testing = m.def_submodule("testing");
  register_testing_bindings(testing);
}
