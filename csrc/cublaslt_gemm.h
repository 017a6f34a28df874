// cuBLASLt fallback: descriptors and the heuristic algorithm cached per problem, a table's measured configuration
// checked on first use, optional per-shape autotuning.
#pragma once

#include <cublasLt.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cublaslt_config.h"
#include "gemm_args.h"
#include "workspace.h"

namespace cudal2 {

enum class LtPolicy {
  kHeuristic,  // the top heuristic algorithm
  kAutotune,   // time the heuristic's candidates once per problem (not while capturing), keep the fastest
  kCached      // a tuned algorithm if one is known (from this process or the tuning file), else the heuristic
};

// A table's cuBLASLt choice for one problem: the configuration it measured fastest, and the configurations it measured
// within a few percent of it (its near-ties, fastest first). Which of them is fastest differs between cards of one
// model, so a problem's first eager call times them on this GPU and keeps one that beats the table's clearly
// (kKeepEntryWithin in cublaslt_gemm.cpp; `rival_count` 0: no timing).
struct LtTableChoice {
  static constexpr int kMaxRivals = 4;
  LtConfig config;
  std::array<LtConfig, kMaxRivals> rivals{};
  int rival_count = 0;
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
  // The table's configuration for this problem, checked on first use: 0 unchecked, 1 runs (table_entry_algo), -1
  // cannot. table_algo is what runs: the entry's algorithm, or the near-tie its confirmation found fastest here.
  int table_state = 0;
  LtConfig table_config;
  cublasLtMatmulAlgo_t table_entry_algo{};
  cublasLtMatmulAlgo_t table_algo{};
  bool table_confirmed = false;  // the near-ties were timed on this GPU (never while capturing)
  int table_pick = 0;            // 0: the entry's configuration runs; i > 0: its i-th near-tie
  std::mutex mutex;      // guards the bias attribute, the tuned and the table fields
  ~LtPlan();
};

// Description of what the fallback would run for a problem (for explain()).
struct LtChoice {
  bool available;
  const char* source;  // "table", "tuned" or "heuristic": where the algorithm that runs comes from
  int table_pick;       // with a table source: 0 the entry's configuration, i > 0 its i-th near-tie
  bool table_confirmed;  // with a table source: whether its near-ties were timed here (first eager call)
  std::string config;  // its configuration (LtConfig::str)
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
  // The dispatcher's instance (torch's cuBLASLt handles).
  static CublasLtGemm& instance();
  // A separate instance with its own handles, plans and tuning, for baselines timed beside cudal2 in one process:
  // nothing a baseline tunes reaches the dispatcher.
  static CublasLtGemm& baseline();

  // Runs the GEMM on g.stream; false when cuBLASLt has no algorithm for it (the caller then uses torch).
  // `table`: the table's measured choice for this problem, used when its configuration passes cuBLASLt's check for
  // the problem (checked once per plan; one that fails is reported by a single warning and the heuristic runs). Its
  // near-ties are timed against it at the problem's first call outside stream capture (synchronises once).
  bool run(const GemmArgs& g, LtPolicy policy, const Workspace& ws, const LtTableChoice* table = nullptr);

  LtChoice describe(const GemmArgs& g, const LtTableChoice* table = nullptr);

  // The heuristic's candidates for g's problem as configurations, best first (the tuner times them).
  std::vector<LtConfig> candidate_configs(const GemmArgs& g);

  // Runs g with exactly `config` (rebuilt and checked for this problem); false with `why` set when it cannot.
  bool run_config(const GemmArgs& g, const LtConfig& config, const Workspace& ws, std::string* why);

  // The calling thread's handle of this instance for `device`.
  cublasLtHandle_t handle(int device);

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
  explicit CublasLtGemm(bool own_handles) : own_handles_(own_handles) {}
  std::shared_ptr<LtPlan> plan_for(const GemmArgs& g, const LtPlanKey& key);
  void tune(const GemmArgs& g, LtPlan& plan, const Workspace& ws);
  // Whether the table's configuration runs this plan's problem (checks it on first use; the plan's mutex is held).
  bool table_algo_ready(const GemmArgs& g, LtPlan& plan, const LtConfig& config);
  // Times the table's configuration against its runnable near-ties on g's buffers and keeps the fastest (the table's
  // own unless beaten by more than kKeepEntryWithin) as plan.table_algo (the plan's mutex is held; not while
  // capturing). Without near-ties, the entry's own runs.
  void confirm_table_choice(const GemmArgs& g, LtPlan& plan, const LtTableChoice& table, const Workspace& ws);
  bool check_algo(const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo);

  const bool own_handles_;
  std::mutex mutex_;
  std::unordered_map<LtPlanKey, std::shared_ptr<LtPlan>, LtPlanKeyHash> plans_;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> known_algos_;
};

// Enqueues one cublasLtMatmul of `plan` with `algo` on `handle` (the plan's mutex must be held). Returns the cuBLAS
// status.
cublasStatus_t lt_matmul(cublasLtHandle_t handle, const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo,
                         const Workspace& ws);

// Times `algos` for `plan`'s problem on g's buffers (synchronises; never while capturing) and returns the index of
// the fastest, or -1 when none runs; algos[0] (the heuristic's or the table's choice) is always a finalist, and it is
// kept unless another finalist's median is more than `keep_first_within` (a fraction) below its own.
// Implemented in cublaslt_autotune.cpp.
int fastest_algo(cublasLtHandle_t handle, const GemmArgs& g, LtPlan& plan, const std::vector<cublasLtMatmulAlgo_t>& algos,
                 const Workspace& ws, float* best_us, float keep_first_within = 0.f);

// Whether work enqueued on `stream` now would be captured into a graph (nothing may be timed then).
bool stream_capturing(cudaStream_t stream);

}  // namespace cudal2
