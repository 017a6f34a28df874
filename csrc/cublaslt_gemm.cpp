// cuBLASLt fallback: descriptor and heuristic cache per problem; a table's configuration checked on first use; tuned
// algorithms from this process or a file.
#include "cublaslt_gemm.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

namespace cudal2 {
namespace {

constexpr int kMaxCandidates = 100;
// A table entry was picked by CUDA-graph replay on this GPU model and its near-ties are within 5% of it there; the
// first-call confirmation (event-timed bursts, about a millisecond per candidate) keeps the entry unless a near-tie
// beats it by more than this fraction. With no margin, 488 of 1538 G1000 shapes switched on an H100 and the switches
// ran at 0.993 of a fresh autotune where keeping the entry ran at 1.001
// (nvidia_h100_80gb_hbm3/table_drift_g1000_2026-11-26_8f92acb.md).
constexpr float kKeepEntryWithin = 0.02f;

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cudal2: cuBLASLt ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

cudaDataType_t cuda_type(int dtype) { return dtype == CUDAL2_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

std::string to_hex(const void* data, size_t bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
}

bool from_hex(const std::string& hex, void* data, size_t bytes) {
  if (hex.size() != 2 * bytes) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return false;
    p[i] = static_cast<unsigned char>(value);
  }
  return true;
}

// The calling thread's cuBLASLt handle for `device` (the current device in every caller). torch's pool leases one per
// (thread, device) for the thread's lifetime, so it is looked up once per thread instead of per call (torch's lookup
// queries the current device and a map).
cublasLtHandle_t torch_lt_handle(int device) {
  constexpr int kMaxDevices = 64;
  thread_local std::array<cublasLtHandle_t, kMaxDevices> handles{};
  if (device < 0 || device >= kMaxDevices) return at::cuda::getCurrentCUDABlasLtHandle();
  if (handles[device] == nullptr) handles[device] = at::cuda::getCurrentCUDABlasLtHandle();
  return handles[device];
}

// A handle of the calling thread for `device` that no other code uses (the baseline instance's), created on first
// use and kept for the thread's lifetime.
cublasLtHandle_t own_lt_handle(int device) {
  constexpr int kMaxDevices = 64;
  thread_local std::array<cublasLtHandle_t, kMaxDevices> handles{};
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "cudal2: device index ", device, " out of range");
  if (handles[device] == nullptr) check_lt(cublasLtCreate(&handles[device]), "Create");
  return handles[device];
}

}  // namespace

bool LtPlanKey::operator==(const LtPlanKey& o) const {
  return device == o.device && dtype == o.dtype && layout == o.layout && m == o.m && n == o.n && k == o.k &&
         lda == o.lda && ldb == o.ldb && ldd == o.ldd && has_bias == o.has_bias && align_a == o.align_a &&
         align_b == o.align_b && align_d == o.align_d && align_bias == o.align_bias;
}

std::string LtPlanKey::str() const {
  std::ostringstream s;
  s << (layout == CUDAL2_NT ? "nt" : "nn") << '_' << (dtype == CUDAL2_BF16 ? "bf16" : "fp16") << '_' << m << '_' << n
    << '_' << k << "_ld" << lda << '_' << ldb << '_' << ldd << "_bias" << has_bias << "_al" << align_a << '_'
    << align_b << '_' << align_d << '_' << align_bias;
  return s.str();
}

size_t LtPlanKeyHash::operator()(const LtPlanKey& k) const {
  size_t h = ShapeKeyHash()(ShapeKey{k.layout, k.dtype, k.m, k.n, k.k});
  for (int64_t v : {k.lda, k.ldb, k.ldd, int64_t(k.device), int64_t(k.has_bias), int64_t(k.align_a),
                    int64_t(k.align_b), int64_t(k.align_d), int64_t(k.align_bias)}) {
    h = h * 1000003u ^ std::hash<int64_t>()(v);
  }
  return h;
}

LtPlanKey lt_plan_key(const GemmArgs& g) {
  return LtPlanKey{g.device, g.dtype, g.layout, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.bias != nullptr ? 1 : 0,
                   pointer_alignment(g.a), pointer_alignment(g.b), pointer_alignment(g.d),
                   g.bias != nullptr ? pointer_alignment(g.bias) : 16};
}

LtPlan::~LtPlan() {
  if (layout_a) cublasLtMatrixLayoutDestroy(layout_a);
  if (layout_b) cublasLtMatrixLayoutDestroy(layout_b);
  if (layout_d) cublasLtMatrixLayoutDestroy(layout_d);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

CublasLtGemm& CublasLtGemm::instance() {
  static auto* gemm = new CublasLtGemm(false);  // leaked: plans must outlive static destruction order
  return *gemm;
}

CublasLtGemm& CublasLtGemm::baseline() {
  static auto* gemm = new CublasLtGemm(true);
  return *gemm;
}

cublasLtHandle_t CublasLtGemm::handle(int device) {
  return own_handles_ ? own_lt_handle(device) : torch_lt_handle(device);
}

// Column-major view of the row-major problem: D^T[N, M] = op(B)^T[N, K] @ A^T[K, M]. cuBLASLt's "A" is our B and its
// "B" is our A; the bias runs along cuBLASLt's rows, i.e. our N.
std::shared_ptr<LtPlan> CublasLtGemm::plan_for(const GemmArgs& g, const LtPlanKey& key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  auto plan = std::make_shared<LtPlan>();
  const cudaDataType_t type = cuda_type(g.dtype);
  check_lt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t trans_a = g.layout == CUDAL2_NT ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "TRANSB");
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
             "EPILOGUE");
  }
  if (g.layout == CUDAL2_NT) {
    check_lt(cublasLtMatrixLayoutCreate(&plan->layout_a, type, g.k, g.n, g.ldb), "layout B");
  } else {
    check_lt(cublasLtMatrixLayoutCreate(&plan->layout_a, type, g.n, g.k, g.ldb), "layout B");
  }
  check_lt(cublasLtMatrixLayoutCreate(&plan->layout_b, type, g.k, g.m, g.lda), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&plan->layout_d, type, g.n, g.m, g.ldd), "layout D");

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const uint64_t ws_bytes = kWorkspaceBytes;
  const uint32_t align_a = key.align_b, align_b = key.align_a, align_cd = key.align_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof(align_cd));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof(align_cd));
  // fp32 accumulation is the contract: split-K algorithms may only reduce in the compute type (fp32), never in place
  // or in the output type (fp16/bf16 partial sums).
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                       sizeof(reduction_mask));
  std::vector<cublasLtMatmulHeuristicResult_t> results(kMaxCandidates);
  int returned = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle(g.device), plan->desc, plan->layout_a,
                                     plan->layout_b, plan->layout_d, plan->layout_d, pref, kMaxCandidates,
                                     results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < returned; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->candidates.push_back(results[i]);
    }
  }

  std::lock_guard<std::mutex> lock(mutex_);
  auto known = known_algos_.find(key.str());
  if (known != known_algos_.end() && !plan->candidates.empty()) {
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle(g.device), plan->desc, plan->layout_a, plan->layout_b, plan->layout_d,
                                plan->layout_d, &known->second, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= kWorkspaceBytes) {
      plan->tuned = true;
      plan->tuned_algo = known->second;
    }
  }
  return plans_.emplace(key, plan).first->second;
}

cublasStatus_t lt_matmul(cublasLtHandle_t handle, const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo,
                         const Workspace& ws) {
  if (g.bias != nullptr) {
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias));
  }
  const float alpha = 1.f, beta = 0.f;
  return cublasLtMatmul(handle, plan.desc, &alpha, g.b, plan.layout_a, g.a,
                        plan.layout_b, &beta, g.d, plan.layout_d, g.d, plan.layout_d, &algo, ws.ptr, ws.bytes,
                        g.stream);
}

void CublasLtGemm::tune(const GemmArgs& g, LtPlan& plan, const Workspace& ws) {
  if (stream_capturing(g.stream) || plan.candidates.empty()) return;  // cannot time while capturing
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (const auto& c : plan.candidates) algos.push_back(c.algo);
  float best_us = 0.f;
  const int best = fastest_algo(handle(g.device), g, plan, algos, ws, &best_us);
  if (best < 0) return;
  plan.tuned = true;
  plan.tuned_index = best;
  plan.tuned_algo = plan.candidates[best].algo;
  plan.tuned_us = best_us;
}

std::shared_ptr<LtPlan> CublasLtGemm::plan(const GemmArgs& g) {
  const LtPlanKey key = lt_plan_key(g);
  // Repeated calls of one problem (the common case in a model) skip the shared map and its lock.
  // (Per instance: the baseline instance must never see the dispatcher's plans.)
  thread_local const CublasLtGemm* last_owner = nullptr;
  thread_local LtPlanKey last_key{-1};
  thread_local std::shared_ptr<LtPlan> last_plan;
  if (!(last_plan && last_owner == this && key == last_key)) {
    last_plan = plan_for(g, key);
    last_key = key;
    last_owner = this;
  }
  return last_plan;
}

bool CublasLtGemm::check_algo(const GemmArgs& g, LtPlan& plan, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(handle(g.device), plan.desc, plan.layout_a, plan.layout_b, plan.layout_d,
                                 plan.layout_d, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= kWorkspaceBytes;
}

bool CublasLtGemm::table_algo_ready(const GemmArgs& g, LtPlan& plan, const LtConfig& config) {
  if (plan.table_state != 0 && plan.table_config == config) return plan.table_state > 0;
  plan.table_config = config;
  plan.table_confirmed = false;
  plan.table_pick = 0;
  const bool ok = algo_from_config(handle(g.device), g.dtype, config, &plan.table_entry_algo) &&
                  check_algo(g, plan, plan.table_entry_algo);
  plan.table_algo = plan.table_entry_algo;
  plan.table_state = ok ? 1 : -1;
  if (!ok) {
    static std::mutex warned_mutex;
    static std::unordered_set<std::string> warned;
    const std::string entry = (g.layout == CUDAL2_NT ? "nt_" : "nn_") + std::string(g.dtype == CUDAL2_BF16 ? "bf16_" : "fp16_") +
                              std::to_string(g.m) + "_" + std::to_string(g.n) + "_" + std::to_string(g.k);
    std::lock_guard<std::mutex> lock(warned_mutex);
    if (warned.insert(entry + config.str()).second) {
      TORCH_WARN("cudal2: the table's cuBLASLt configuration for ", entry, " (", config.str(),
                 ") cannot run this call on this cuBLASLt; using cuBLASLt's heuristic for it");
    }
  }
  return ok;
}

void CublasLtGemm::confirm_table_choice(const GemmArgs& g, LtPlan& plan, const LtTableChoice& table,
                                        const Workspace& ws) {
  std::vector<cublasLtMatmulAlgo_t> algos{plan.table_entry_algo};
  std::vector<int> picks{0};  // 0: the entry's configuration; i: its i-th near-tie
  for (int i = 0; i < table.rival_count; ++i) {
    cublasLtMatmulAlgo_t algo{};
    if (algo_from_config(handle(g.device), g.dtype, table.rivals[i], &algo) && check_algo(g, plan, algo)) {
      algos.push_back(algo);
      picks.push_back(i + 1);
    }
  }
  float best_us = 0.f;
  const int best =
      algos.size() > 1 ? fastest_algo(handle(g.device), g, plan, algos, ws, &best_us, kKeepEntryWithin) : 0;
  plan.table_pick = picks[std::max(best, 0)];
  plan.table_algo = algos[std::max(best, 0)];
  plan.table_confirmed = true;
}

bool CublasLtGemm::run(const GemmArgs& g, LtPolicy policy, const Workspace& ws, const LtTableChoice* table) {
  std::shared_ptr<LtPlan> p = plan(g);
  std::lock_guard<std::mutex> lock(p->mutex);
  const cublasLtHandle_t h = handle(g.device);
  if (table != nullptr && table_algo_ready(g, *p, table->config)) {
    if (table->rival_count == 0) {
      if (p->table_confirmed) {  // near-ties timed earlier, now not wanted (confirmation turned off): the entry's own
        p->table_algo = p->table_entry_algo;
        p->table_pick = 0;
        p->table_confirmed = false;
      }
    } else if (!p->table_confirmed && !stream_capturing(g.stream)) {
      confirm_table_choice(g, *p, *table, ws);  // under capture the entry's own runs until an eager call confirms
    }
    if (lt_matmul(h, g, *p, p->table_algo, ws) == CUBLAS_STATUS_SUCCESS) return true;
  }
  if (policy == LtPolicy::kAutotune && !p->tuned) tune(g, *p, ws);
  if (policy != LtPolicy::kHeuristic && p->tuned && lt_matmul(h, g, *p, p->tuned_algo, ws) == CUBLAS_STATUS_SUCCESS) {
    return true;
  }
  // The heuristic's best runnable candidate. cuBLASLt can reject one at launch that its heuristic offered (it is not
  // told every property of the call, e.g. the bias pointer's alignment); such a candidate is skipped from then on.
  for (; p->first_runnable < static_cast<int>(p->candidates.size()); ++p->first_runnable) {
    if (lt_matmul(h, g, *p, p->candidates[p->first_runnable].algo, ws) == CUBLAS_STATUS_SUCCESS) return true;
  }
  return false;
}

std::vector<LtConfig> CublasLtGemm::candidate_configs(const GemmArgs& g) {
  std::shared_ptr<LtPlan> p = plan(g);
  std::lock_guard<std::mutex> lock(p->mutex);
  std::vector<LtConfig> out;
  for (const auto& c : p->candidates) out.push_back(config_of(c.algo));
  return out;
}

bool CublasLtGemm::run_config(const GemmArgs& g, const LtConfig& config, const Workspace& ws, std::string* why) {
  std::shared_ptr<LtPlan> p = plan(g);
  std::lock_guard<std::mutex> lock(p->mutex);
  cublasLtMatmulAlgo_t algo{};
  if (!algo_from_config(handle(g.device), g.dtype, config, &algo)) {
    *why = "cuBLASLt does not know this configuration (" + config.str() + ")";
    return false;
  }
  if (!check_algo(g, *p, algo)) {
    *why = "cuBLASLt's check rejects this configuration for the problem (" + config.str() + ")";
    return false;
  }
  const cublasStatus_t status = lt_matmul(handle(g.device), g, *p, algo, ws);
  if (status != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasLtMatmul failed with status " + std::to_string(static_cast<int>(status));
    return false;
  }
  return true;
}

LtChoice CublasLtGemm::describe(const GemmArgs& g, const LtTableChoice* table) {
  const LtPlanKey key = lt_plan_key(g);
  std::shared_ptr<LtPlan> plan = plan_for(g, key);
  std::lock_guard<std::mutex> lock(plan->mutex);
  const bool from_table = table != nullptr && table_algo_ready(g, *plan, table->config);
  const bool heuristic_available = plan->first_runnable < static_cast<int>(plan->candidates.size());
  const bool available = from_table || plan->tuned || heuristic_available;
  const char* source = from_table ? "table" : (plan->tuned ? "tuned" : "heuristic");
  std::string config;
  int split_k = 0, reduction = 0;
  if (available) {
    const cublasLtMatmulAlgo_t& algo =
        from_table ? plan->table_algo : (plan->tuned ? plan->tuned_algo : plan->candidates[plan->first_runnable].algo);
    const LtConfig c = config_of(algo);
    config = c.str();
    split_k = static_cast<int>(c.split_k());
    reduction = static_cast<int>(c.reduction());
  }
  return LtChoice{available, source, from_table ? plan->table_pick : -1, from_table && plan->table_confirmed,
                  config, plan->tuned,
                  from_table ? -1 : (plan->tuned ? plan->tuned_index : plan->first_runnable),
                  static_cast<int>(plan->candidates.size()), plan->tuned_us, key.str(), split_k, reduction};
}

std::vector<CublasLtGemm::TunedRecord> CublasLtGemm::tuned_records() {
  std::vector<TunedRecord> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& kv : plans_) {
    std::lock_guard<std::mutex> plan_lock(kv.second->mutex);
    if (kv.second->tuned && kv.second->tuned_index >= 0) {
      out.push_back({kv.first.str(), to_hex(&kv.second->tuned_algo, sizeof(cublasLtMatmulAlgo_t)),
                     kv.second->tuned_us});
    }
  }
  return out;
}

void CublasLtGemm::add_known_algo(const std::string& key, const std::string& algo_hex) {
  cublasLtMatmulAlgo_t algo{};
  if (!from_hex(algo_hex, &algo, sizeof(algo))) {
    throw std::invalid_argument("cudal2: malformed cuBLASLt algorithm for " + key);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  known_algos_[key] = algo;
}

}  // namespace cudal2
