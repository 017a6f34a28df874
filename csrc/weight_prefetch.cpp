// Weight-prefetch nodes in a captured graph (see weight_prefetch.h).
#include "weight_prefetch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "gemm_ops.h"
#include "l2_prefetch.h"

namespace cudal2 {
namespace {

std::atomic<int64_t> g_added{0};

// The region of `t` to prefetch, or false when `t` is not a prefetchable matrix on `device`.
bool region_of(const at::Tensor& t, int device, L2PrefetchRegion& region) {
  if (!t.defined() || !t.is_cuda() || t.get_device() != device || t.dim() != 2 || t.numel() == 0 || t.stride(1) != 1)
    return false;
  region = {t.data_ptr(), t.size(0), t.size(1) * static_cast<int64_t>(t.element_size()),
            t.stride(0) * static_cast<int64_t>(t.element_size())};
  return true;
}

}  // namespace

int add_weight_prefetch(at::TensorList weights, double fraction) {
  if (weights.empty() || !(fraction > 0.0)) return 0;
  const int device = c10::cuda::current_device();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // asked for so that programmatic (PDL) edges are not a lossy query
  size_t num_deps = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(at::cuda::getCurrentCUDAStream(device).stream(), &status, nullptr, &graph,
                                          &deps, &edges, &num_deps));
  if (status != cudaStreamCaptureStatusActive || num_deps == 0) return 0;
  const std::vector<cudaGraphNode_t> after(deps, deps + num_deps);  // `deps` is only valid until the next graph edit
  const int sm_count = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  L2PrefetchBatch batch;
  batch.lines_per_chunk = static_cast<int>(std::clamp(std::ceil(std::min(fraction, 1.0) * 8.0), 1.0, 8.0));
  int added = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (region_of(weights[i], device, batch.regions[batch.count])) ++batch.count;
    if (batch.count == kMaxL2PrefetchRegions || (i + 1 == weights.size() && batch.count > 0)) {
      cudaGraphNode_t node = nullptr;
      C10_CUDA_CHECK(add_l2_prefetch_node(&node, graph, after.data(), after.size(), batch, sm_count));
      added += node != nullptr;
      batch.count = 0;
    }
  }
  g_added += added;
  return added;
}

int64_t weight_prefetch_nodes() { return g_added.load(); }

at::Tensor linear_prefetch(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::TensorList prefetch, double fraction) {
  at::Tensor y = cudal2::linear(x, weight, bias);
  if (x.is_cuda()) {
    c10::cuda::CUDAGuard guard(x.device());
    add_weight_prefetch(prefetch, fraction);
  }
  return y;
}

}  // namespace cudal2
