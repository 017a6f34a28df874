// cuBLASLt fallback: descriptors and the heuristic algorithm cached per problem, optional per-shape autotuning.
#pragma once

#include <cublasLt.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gemm_args.h"
#include "workspace.h"

namespace cudal2 {

enum class LtPolicy {
  kHeuristic,  // the top heuristic algorithm
  kAutotune,   // time the heuristic's candidates once per problem (not while capturing), keep the fastest
  kCached      // a tuned algorithm if one is known (from this process or the tuning file), else the heuristic
};

// Everything a cuBLASLt call depends on besides pointers: shape, strides, dtype, layout, bias, alignments.
struct LtPlanKey {
  int device, dtype, layout;
  int64_t m, n, k, lda, ldb, ldd;
  int has_bias, align_a, align_b, align_d, align_bias;
  bool operator==(const LtPlanKey& o) const;
  std::string str() const;  // stable text form, used as the tuning-file key
};

struct LtPlanKeyHash {
  size_t operator()(const LtPlanKey& k) const;
};

LtPlanKey lt_plan_key(const GemmArgs& g);

// One cached problem: descriptors, heuristic candidates and the tuned choice.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_d = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;  // best first; empty: cuBLASLt has no algorithm
  bool tuned = false;
  cublasLtMatmulAlgo_t tuned_algo{};
  float tuned_us = 0.f;
  int tuned_index = -1;  // index into candidates (or -1 when the algorithm came from the tuning file)
  int first_runnable = 0;  // candidates before it failed to launch for this problem
  std::mutex mutex;      // guards the bias attribute and the tuned fields
  ~LtPlan();
};

// Description of what the fallback would run for a problem (for explain()).
struct LtChoice {
  bool available;
  bool tuned;
  int candidate_index;  // -1 if from the tuning file
  int candidate_count;
  float tuned_us;
  std::string key;
  int split_k;           // the chosen algorithm's split-K count (1: none)
  int reduction_scheme;  // its cublasLtReductionScheme_t (0: none, 2: in the compute type)
};

class CublasLtGemm {
 public:
  static CublasLtGemm& instance();

  // Runs the GEMM on g.stream; false when cuBLASLt has no algorithm for it (the caller then uses torch).
  bool run(const GemmArgs& g, LtPolicy policy, const Workspace& ws);

  LtChoice describe(const GemmArgs& g);

  // The cached plan of g's problem (created on first use; the last one is remembered per thread).
  std::shared_ptr<LtPlan> plan(const GemmArgs& g);

  // Tuning results of this process, and results to reuse (validated when their problem first appears).
  struct TunedRecord {
    std::string key;
    std::string algo_hex;
    float us;
  };
  std::vector<TunedRecord> tuned_records();
  void add_known_algo(const std::string& key, const std::string& algo_hex);

 private:
  std::shared_ptr<LtPlan> plan_for(const GemmArgs& g, const LtPlanKey& key);
  void tune(const GemmArgs& g, LtPlan& plan, const Workspace& ws);

  std::mutex mutex_;
  std::unordered_map<LtPlanKey, std::shared_ptr<LtPlan>, LtPlanKeyHash> plans_;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> known_algos_;
};

// Enqueues one cublasLtMatmul of `plan` with `algo` (the plan's mutex must be held). Returns the cuBLAS status.
cublasStatus_t lt_matmul(const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo, const Workspace& ws);

// Times every candidate of `plan` on g's buffers (synchronises; never while capturing) and returns the index of the
// fastest, or -1. Implemented in cublaslt_autotune.cpp.
int autotune_candidates(const GemmArgs& g, LtPlan& plan, const Workspace& ws, float* best_us);

}  // namespace cudal2
