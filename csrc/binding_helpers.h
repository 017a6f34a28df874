// Helpers shared by the extension's three binding files (user ops, tuning, testing).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "gemm_args.h"
#include "gemm_route.h"

namespace cudal2 {

// explain() and the stage timers decide for a call whose output is not allocated yet: they stand in this address for
// the fresh [M, N] output the call would allocate (16-byte aligned, ldd = N). Kernels' can_implement never
// dereferences it.
void assume_fresh_output(GemmArgs& g);

// "nn" (b is [K, N]) or "nt" (b is [N, K]); anything else raises an error naming what is supported.
cudal2_layout parse_layout(const std::string& layout);

// Routes (a, b in `layout`, bias) into `out` for the low-level entry points, which accept only routable tensors.
Route route_low_level(const char* what, const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                      const at::Tensor& out, const std::string& layout);

}  // namespace cudal2
