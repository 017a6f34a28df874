// Times cuBLASLt algorithms for one problem and picks the fastest (median of several samples), the fastest few and
// the first (the heuristic's or the table's choice) re-timed in interleaved rounds before the pick (as
// cudal2_ops.tune does). Serves CUDAL2_TUNE's autotuning and the confirmation of a table entry's near-ties.
//
// Each timed burst is queued behind a GPU spin kernel, so the host has enqueued every call before the first one runs
// and the events measure the kernels back to back, not the host's issue rate (a small GEMM takes ~2.5 us on the GPU
// but ~12 us to issue).
#include <ATen/cuda/Sleep.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "cublaslt_gemm.h"

namespace cudal2 {
namespace {

constexpr int kSamples = 5;
constexpr double kTargetSampleUs = 200.0;  // calls per sample are scaled so that one sample takes about this long
constexpr int kMaxCallsPerSample = 50;
constexpr double kBudgetMs = 400.0;  // per problem: later candidates are skipped once this is spent
constexpr int64_t kSpinCyclesPerCall = 60000;  // ~30 us at 2 GHz: more than the host needs to issue one call
constexpr int kFinalists = 3;      // the fastest of the first pass timed again (with the heuristic's choice)
constexpr int kRetimeRounds = 3;   // interleaved rounds of that re-timing; each finalist's median over them

// Median time per call (us) of `algo`, or a negative value when a call fails.
float time_algo(cublasLtHandle_t handle, const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo,
                const Workspace& ws, cudaEvent_t start, cudaEvent_t stop) {
  if (lt_matmul(handle, g, plan, algo, ws) != CUBLAS_STATUS_SUCCESS) return -1.f;  // warm-up
  at::cuda::sleep(kSpinCyclesPerCall);
  cudaEventRecord(start, g.stream);
  if (lt_matmul(handle, g, plan, algo, ws) != CUBLAS_STATUS_SUCCESS) return -1.f;
  cudaEventRecord(stop, g.stream);
  cudaEventSynchronize(stop);
  float first_ms = 0.f;
  cudaEventElapsedTime(&first_ms, start, stop);
  const int calls = std::clamp(static_cast<int>(kTargetSampleUs / std::max(1.0, first_ms * 1e3)), 1,
                               kMaxCallsPerSample);
  std::vector<float> samples;
  for (int s = 0; s < kSamples; ++s) {
    at::cuda::sleep(kSpinCyclesPerCall * calls);
    cudaEventRecord(start, g.stream);
    for (int i = 0; i < calls; ++i) lt_matmul(handle, g, plan, algo, ws);
    cudaEventRecord(stop, g.stream);
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    samples.push_back(ms * 1e3f / calls);
  }
  std::nth_element(samples.begin(), samples.begin() + kSamples / 2, samples.end());
  return samples[kSamples / 2];
}

}  // namespace

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capture);
  return capture != cudaStreamCaptureStatusNone;
}

int fastest_algo(cublasLtHandle_t handle, const GemmArgs& g, LtPlan& plan, const std::vector<cublasLtMatmulAlgo_t>& algos,
                 const Workspace& ws, float* best_us, float keep_first_within) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<float, int>> timed;  // (us, candidate index) of the first pass
  for (int i = 0; i < static_cast<int>(algos.size()); ++i) {
    const double spent_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0 && spent_ms > kBudgetMs) break;
    const float us = time_algo(handle, g, plan, algos[i], ws, start, stop);
    if (us > 0.f) timed.emplace_back(us, i);
  }
  int best = -1;
  if (!timed.empty()) {
    // A single pass picks by noise where candidates differ by less than it (small problems): the fastest few, and
    // the first algorithm, are timed again in interleaved rounds and the best median wins.
    std::sort(timed.begin(), timed.end());
    std::vector<int> finalists;
    for (int j = 0; j < std::min<int>(kFinalists, timed.size()); ++j) finalists.push_back(timed[j].second);
    if (std::find(finalists.begin(), finalists.end(), 0) == finalists.end() &&
        std::any_of(timed.begin(), timed.end(), [](const auto& t) { return t.second == 0; })) {
      finalists.push_back(0);
    }
    std::vector<std::vector<float>> rounds(finalists.size());
    for (int r = 0; r < kRetimeRounds; ++r) {
      for (size_t j = 0; j < finalists.size(); ++j) {
        const size_t f = (j + r) % finalists.size();
        const float us = time_algo(handle, g, plan, algos[finalists[f]], ws, start, stop);
        if (us > 0.f) rounds[f].push_back(us);
      }
    }
    float first_us = -1.f;
    for (size_t f = 0; f < finalists.size(); ++f) {
      if (rounds[f].empty()) continue;
      std::nth_element(rounds[f].begin(), rounds[f].begin() + rounds[f].size() / 2, rounds[f].end());
      const float us = rounds[f][rounds[f].size() / 2];
      if (finalists[f] == 0) first_us = us;
      if (best < 0 || us < *best_us) {
        best = finalists[f];
        *best_us = us;
      }
    }
    if (best != 0 && first_us > 0.f && *best_us >= first_us * (1.f - keep_first_within)) {
      best = 0;
      *best_us = first_us;
    }
  }
  cudaGetLastError();  // a failing candidate must not leave a sticky launch error behind
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace cudal2
