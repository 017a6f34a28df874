// Arming and placing weight prefetches in a captured graph (see weight_prefetch.h).
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

// A prefetch armed after a GEMM: what to prefetch, and the capture and graph nodes it must follow.
struct ArmedPrefetch {
  unsigned long long capture_id = 0;  // 0: nothing armed
  int device = -1;
  std::vector<cudaGraphNode_t> after;  // the capturing stream's dependencies right after the arming GEMM
  std::vector<L2PrefetchBatch> batches;
};

// Capture is per thread (torch.cuda.graph captures from the calling thread), and so is the armed prefetch.
thread_local ArmedPrefetch tl_armed;
std::atomic<int64_t> g_armed{0}, g_placed{0}, g_dropped{0};

struct CaptureState {
  unsigned long long id = 0;  // 0: not capturing
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t num_deps = 0;
};

CaptureState capture_state(cudaStream_t stream) {
  CaptureState s;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphEdgeData* edges = nullptr;  // asked for so that programmatic (PDL) edges are not a lossy query
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &s.id, &s.graph, &s.deps, &edges, &s.num_deps));
  if (status != cudaStreamCaptureStatusActive) s = CaptureState{};
  return s;
}

// The region of `t` to prefetch, or false when `t` is not a prefetchable matrix on `device`.
bool region_of(const at::Tensor& t, int device, L2PrefetchRegion& region) {
  if (!t.defined() || !t.is_cuda() || t.get_device() != device || t.dim() != 2 || t.numel() == 0 || t.stride(1) != 1)
    return false;
  region = {t.data_ptr(), t.size(0), t.size(1) * static_cast<int64_t>(t.element_size()),
            t.stride(0) * static_cast<int64_t>(t.element_size())};
  return true;
}

}  // namespace

void place_weight_prefetch() {
  if (tl_armed.capture_id == 0) return;
  ArmedPrefetch armed = std::move(tl_armed);
  tl_armed = ArmedPrefetch{};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const CaptureState capture = capture_state(stream);
  if (capture.id != armed.capture_id || c10::cuda::current_device() != armed.device) {
    ++g_dropped;  // armed in a capture that has ended (or a GEMM on another device comes first): nothing to place
    return;
  }
  const int sm_count = at::cuda::getDeviceProperties(armed.device)->multiProcessorCount;
  std::vector<cudaGraphNode_t> nodes;
  for (const L2PrefetchBatch& batch : armed.batches) {
    cudaGraphNode_t node = nullptr;
    C10_CUDA_CHECK(add_l2_prefetch_node(&node, capture.graph, armed.after.data(), armed.after.size(), batch, sm_count));
    if (node != nullptr) nodes.push_back(node);
  }
  if (!nodes.empty()) {
    C10_CUDA_CHECK(cudaStreamUpdateCaptureDependencies(stream, nodes.data(), nullptr, nodes.size(),
                                                       cudaStreamAddCaptureDependencies));
    ++g_placed;
  }
}

bool arm_weight_prefetch(at::TensorList weights, double fraction) {
  if (weights.empty() || !(fraction > 0.0)) return false;
  const int device = c10::cuda::current_device();
  const CaptureState capture = capture_state(at::cuda::getCurrentCUDAStream(device).stream());
  if (capture.id == 0 || capture.num_deps == 0) return false;
  ArmedPrefetch armed;
  armed.capture_id = capture.id;
  armed.device = device;
  armed.after.assign(capture.deps, capture.deps + capture.num_deps);
  L2PrefetchBatch batch;
  batch.lines_per_chunk = static_cast<int>(std::clamp(std::ceil(std::min(fraction, 1.0) * 8.0), 1.0, 8.0));
  for (const at::Tensor& w : weights) {
    if (!region_of(w, device, batch.regions[batch.count])) continue;
    if (++batch.count == kMaxL2PrefetchRegions) {
      armed.batches.push_back(batch);
      batch.count = 0;
    }
  }
  if (batch.count > 0) armed.batches.push_back(batch);
  if (armed.batches.empty()) return false;
  if (tl_armed.capture_id != 0) ++g_dropped;  // armed before and never placed (no cudal2 GEMM in between)
  tl_armed = std::move(armed);
  ++g_armed;
  return true;
}

WeightPrefetchCounts weight_prefetch_counts() { return {g_armed.load(), g_placed.load(), g_dropped.load()}; }

at::Tensor linear_prefetch(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::TensorList prefetch, double fraction) {
  at::Tensor y = cudal2::linear(x, weight, bias);
  if (x.is_cuda()) {
    c10::cuda::CUDAGuard guard(x.device());
    arm_weight_prefetch(prefetch, fraction);
  }
  return y;
}

}  // namespace cudal2
