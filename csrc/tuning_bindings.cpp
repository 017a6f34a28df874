// `cudal2_ops._C.tuning`: what the tuner (`python -m cudal2_ops tune`) and the problem recorder need: the heuristic's
// cuBLASLt candidates as configurations, a call with one given configuration or one given kernel, and the
// dispatcher's problem recording. Everything runs through the dispatcher's own cuBLASLt instance and workspace, so
// what the tuner times is what a table entry will run.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include "binding_helpers.h"
#include "cublaslt_gemm.h"
#include "dispatch.h"
#include "kernel_registry.h"
#include "tuning_bindings.h"

namespace cudal2 {

LtConfig config_from(const std::vector<int64_t>& fields) {
  TORCH_CHECK(static_cast<int>(fields.size()) == LtConfig::kFields, "a cuBLASLt configuration has ",
              LtConfig::kFields, " fields (see lt_config_fields()), got ", fields.size());
  LtConfig c;
  std::copy(fields.begin(), fields.end(), c.fields.begin());
  return c;
}

std::vector<std::vector<int64_t>> lt_candidates_on(CublasLtGemm& lt, const at::Tensor& a, const at::Tensor& b,
                                                   at::Tensor& out, const std::string& layout) {
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 lt_candidates", a, b, std::nullopt, out, layout);
  std::vector<std::vector<int64_t>> configs;
  for (const LtConfig& c : lt.candidate_configs(route.args)) configs.emplace_back(c.fields.begin(), c.fields.end());
  return configs;
}

void run_lt_config_on(CublasLtGemm& lt, const at::Tensor& a, const at::Tensor& b,
                      const std::optional<at::Tensor>& bias, at::Tensor& out, const std::string& layout,
                      const std::vector<int64_t>& fields) {
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 run_lt_config", a, b, bias, out, layout);
  const GemmArgs& g = route.args;
  std::string why;
  TORCH_CHECK(lt.run_config(g, config_from(fields), workspace_for(g.device, g.stream), &why),
              "cudal2 run_lt_config: M=", g.m, " N=", g.n, " K=", g.k, ": ", why);
}

namespace {

void run_kernel(const std::string& name, const at::Tensor& a, const at::Tensor& b,
                const std::optional<at::Tensor>& bias, at::Tensor& out, const std::string& layout, int splits,
                int swizzle, int raster) {
  const cudal2_kernel* kernel = KernelRegistry::instance().find(name);
  TORCH_CHECK(kernel != nullptr, "cudal2 run_kernel: no kernel named '", name, "' is loaded");
  c10::cuda::CUDAGuard guard(a.device());
  Route route = route_low_level("cudal2 run_kernel", a, b, bias, out, layout);
  const GemmArgs& g = route.args;
  TableEntry entry;
  entry.kernel = kernel;
  entry.splits = splits;
  entry.swizzle = swizzle;
  entry.raster = raster;
  const cudal2_problem p = make_problem(g, entry, workspace_for(g.device, g.stream),
                                        at::cuda::getDeviceProperties(g.device)->multiProcessorCount);
  const cudal2_status status = kernel->launch(&p);
  TORCH_CHECK(status == CUDAL2_OK, "cudal2 run_kernel: kernel ", name, " returned status ", static_cast<int>(status),
              " for M=", g.m, " N=", g.n, " K=", g.k, " (1 unsupported, 2 workspace, 3 launch failed, 4 bad argument)");
}

}  // namespace

void register_tuning_bindings(pybind11::module_& m) {
  m.doc() = "Tuner and recorder entry points (python -m cudal2_ops tune, cudal2_ops.record_problems).";
  m.def("lt_config_fields", [] {
    const auto& names = lt_config_field_names();
    return std::vector<std::string>(names.begin(), names.end());
  }, "The field names of a cuBLASLt configuration, in the order the other functions take and return them.");
  m.def("lt_candidates", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out, const std::string& layout) {
    return lt_candidates_on(CublasLtGemm::instance(), a, b, out, layout);
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("out"),
        pybind11::arg("layout"), "cuBLASLt's heuristic candidates for this problem as configurations, best first.");
  m.def("run_lt_config", [](const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                            at::Tensor& out, const std::string& layout, const std::vector<int64_t>& config) {
    run_lt_config_on(CublasLtGemm::instance(), a, b, bias, out, layout, config);
  }, pybind11::arg("a"), pybind11::arg("b"), pybind11::arg("bias"),
        pybind11::arg("out"), pybind11::arg("layout"), pybind11::arg("config"),
        "out = a @ b (+ bias) with exactly this cuBLASLt configuration; raises when it cannot run the problem.");
  m.def("run_kernel", &run_kernel, pybind11::arg("name"), pybind11::arg("a"), pybind11::arg("b"),
        pybind11::arg("bias"), pybind11::arg("out"), pybind11::arg("layout"), pybind11::arg("splits"),
        pybind11::arg("swizzle"), pybind11::arg("raster"), "Runs one loaded kernel by name with these knobs.");
  m.def("set_recording", [](bool on) { Dispatcher::instance().set_recording(on); },
        "Turns the dispatcher's problem recording on or off.");
  m.def("recorded", [](bool clear) {
    std::vector<std::tuple<std::string, std::string, int64_t, int64_t, int64_t>> out;
    for (const ShapeKey& k : Dispatcher::instance().recorded(clear)) {
      out.emplace_back(k.layout == CUDAL2_NT ? "nt" : "nn", k.dtype == CUDAL2_BF16 ? "bf16" : "fp16", k.m, k.n, k.k);
    }
    return out;
  }, pybind11::arg("clear"), "The problems recorded so far: (layout, dtype, M, N, K).");
}

}  // namespace cudal2
