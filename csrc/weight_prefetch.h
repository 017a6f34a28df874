// Weight prefetch across the gaps of a captured step. In an LLM decode step the GEMMs stream their weights from HBM
// while the kernels between them (norms, rotary, attention) leave HBM mostly idle. A GEMM may arm a prefetch of the
// next GEMMs' weights; the next cudal2 GEMM captured in the same graph places it: it adds an L2-prefetch kernel node
// that depends only on the arming GEMM's node, so the graph runs it beside the kernels in between, and makes itself
// depend on it. All graph edits happen in the placing call, so a graph that ends before a next GEMM simply has no
// prefetch node (nothing is left unjoined).
//
// Only while the current stream captures a CUDA graph: eager calls arm nothing (there the host issues calls slower
// than the GPU runs them, and an extra kernel would only add host time).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace cudal2 {

// Places the prefetch armed earlier in the capture of the current stream, if any (see above). Every cudal2 GEMM entry
// calls it (after selecting the device) before it enqueues work. A prefetch armed in another capture is dropped.
void place_weight_prefetch();

// After the GEMM just enqueued on the current stream: if the stream is capturing, arms a prefetch into L2 of
// `fraction` (0-1] of each of `weights` (2-D CUDA tensors on the current device with a unit inner stride; others
// are skipped), replacing an armed one that was not placed. Returns whether it armed one.
bool arm_weight_prefetch(at::TensorList weights, double fraction);

// Prefetches armed, placed (as graph nodes) and dropped (armed but the capture ended first) in this process.
struct WeightPrefetchCounts {
  int64_t armed, placed, dropped;
};
WeightPrefetchCounts weight_prefetch_counts();

// F.linear(x, weight, bias), then arm_weight_prefetch(prefetch, fraction) on x's device.
at::Tensor linear_prefetch(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::TensorList prefetch, double fraction);

}  // namespace cudal2
