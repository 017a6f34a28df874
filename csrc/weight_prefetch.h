// Weight prefetch across the gaps of a captured step. In an LLM decode step the GEMMs stream their weights from HBM
// while the kernels between them (norms, rotary, attention) leave HBM mostly idle. Right after a GEMM is captured, the
// caller may add an L2-prefetch kernel node for the next GEMMs' weights that depends only on that GEMM: the graph runs
// it beside the kernels that follow, and nothing waits for it but the end of the graph (a leaf node, so no stream is
// forked and nothing needs joining; a prefetch never changes a result, so no later kernel has to be ordered after it).
//
// Only while the current stream captures a CUDA graph: eager calls add nothing (there the host issues calls slower
// than the GPU runs them, and an extra kernel would only add host time).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace cudal2 {

// If the current stream is capturing: adds to its graph, after the work captured last, prefetch nodes that bring
// `fraction` (0-1] of each of `weights` (2-D CUDA tensors on the current device with a unit inner stride; others are
// skipped) into L2. Returns the number of nodes added (0 when not capturing).
int add_weight_prefetch(at::TensorList weights, double fraction);

// Prefetch nodes added in this process.
int64_t weight_prefetch_nodes();

// F.linear(x, weight, bias), then add_weight_prefetch(prefetch, fraction) on x's device.
at::Tensor linear_prefetch(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::TensorList prefetch, double fraction);

}  // namespace cudal2
