// The `_C.tuning` and `_C.testing` submodules (tuning_bindings.cpp, testing_bindings.cpp) and what they share.
#pragma once

#include <ATen/ATen.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "cublaslt_gemm.h"

namespace cudal2 {

// A cuBLASLt configuration from its fields (lt_config_fields() order); raises for a wrong count.
LtConfig config_from(const std::vector<int64_t>& fields);
// The heuristic's candidates of `lt` for a problem, as configuration fields (best first).
std::vector<std::vector<int64_t>> lt_candidates_on(CublasLtGemm& lt, const at::Tensor& a, const at::Tensor& b,
                                                   at::Tensor& out, const std::string& layout);
// out = a @ b (+ bias) on `lt` with exactly the configuration `fields`; raises when it cannot run the problem.
void run_lt_config_on(CublasLtGemm& lt, const at::Tensor& a, const at::Tensor& b,
                      const std::optional<at::Tensor>& bias, at::Tensor& out, const std::string& layout,
                      const std::vector<int64_t>& fields);

void register_tuning_bindings(pybind11::module_& m);
void register_testing_bindings(pybind11::module_& m);

}  // namespace cudal2
