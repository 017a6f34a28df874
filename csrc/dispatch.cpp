// Dispatch decisions and their execution.
#include "dispatch.h"

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "kernel_registry.h"

namespace cudal2 {
namespace {

struct DeviceInfo {
  int cc;
  int sm_count;
};

DeviceInfo device_info(int device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  return {prop->major * 10 + prop->minor, prop->multiProcessorCount};
}

}  // namespace

cudal2_problem make_problem(const GemmArgs& g, const TableEntry& e, const Workspace& ws, int sm_count) {
  cudal2_problem p{};
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.a = g.a;
  p.lda = g.lda;
  p.b = g.b;
  p.ldb = g.ldb;
  p.d = g.d;
  p.ldd = g.ldd;
  p.bias = g.bias;
  p.dtype = g.dtype;
  p.layout = g.layout;
  p.workspace = ws.ptr;
  p.workspace_bytes = ws.bytes;
  p.stream = g.stream;
  p.sm_count = sm_count;
  p.splits = e.splits;
  p.swizzle = e.swizzle;
  p.raster = e.raster;
  return p;
}

Dispatcher& Dispatcher::instance() {
  static auto* dispatcher = new Dispatcher();
  return *dispatcher;
}

void Dispatcher::set_table(int device, const std::vector<std::pair<ShapeKey, TableEntry>>& entries,
                           const TableRules& rules) {
  auto t = std::make_unique<DeviceTable>();
  t->rules = rules;
  for (const auto& kv : entries) {
    t->entries[kv.first] = kv.second;
    const ShapeFamilyKey family{kv.first.layout, kv.first.dtype, kv.first.n, kv.first.k};
    if (kv.second.kernel != nullptr) t->tuned_m[family].push_back(kv.first.m);
    if (kv.second.has_lt) t->lt_tuned_m[family].push_back(kv.first.m);
  }
  for (auto& kv : t->tuned_m) std::sort(kv.second.begin(), kv.second.end());
  for (auto& kv : t->lt_tuned_m) std::sort(kv.second.begin(), kv.second.end());
  if (device < 0 || device >= kMaxDevices) throw std::out_of_range("cudal2: device index out of range");
  std::lock_guard<std::mutex> lock(mutex_);
  tables_[device].store(t.get(), std::memory_order_release);
  retired_.push_back(std::move(t));
  logged_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

size_t Dispatcher::table_size(int device) const {
  auto t = table(device);
  return t ? t->entries.size() : 0;
}

void Dispatcher::set_table_loader(std::function<void(int)> loader) {
  std::lock_guard<std::mutex> lock(mutex_);
  table_loader_ = std::move(loader);
  table_requested_.clear();
  requested_mask_ = 0;
}

void Dispatcher::request_table(int device) {
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (requested_mask_.load(std::memory_order_acquire) & bit) != 0) return;
  std::function<void(int)> loader;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!table_loader_) return;
    requested_mask_.fetch_or(bit, std::memory_order_acq_rel);
    if (!table_requested_.emplace(device, true).second) return;
    loader = table_loader_;
  }
  loader(device);  // outside the lock: the loader calls set_table
}

const Dispatcher::DeviceTable* Dispatcher::table(int device) const {
  return device >= 0 && device < kMaxDevices ? tables_[device].load(std::memory_order_acquire) : nullptr;
}

void Dispatcher::set_config(const DispatchConfig& config) {
  kernels_enabled_ = config.kernels_enabled;
  tuning_ = config.tuning;
  print_configs_ = config.print_configs;
  confirm_near_ties_ = config.confirm_near_ties;
  std::lock_guard<std::mutex> lock(mutex_);
  logged_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

DispatchConfig Dispatcher::config() const {
  return DispatchConfig{kernels_enabled_.load(std::memory_order_relaxed), tuning_.load(std::memory_order_relaxed),
                        print_configs_.load(std::memory_order_relaxed),
                        confirm_near_ties_.load(std::memory_order_relaxed)};
}

bool Dispatcher::kernel_fits(const TableEntry& e, const GemmArgs& g, int cc, int sm_count) const {
  if (e.kernel == nullptr || !KernelRegistry::instance().runnable_on(e.kernel, cc)) return false;
  if (g.bias != nullptr && !e.kernel->has_bias) return false;
  const Workspace no_ws{nullptr, kWorkspaceBytes};
  const cudal2_problem p = make_problem(g, e, no_ws, sm_count);
  return e.kernel->can_implement(&p) == CUDAL2_OK && e.kernel->workspace_size(&p) <= kWorkspaceBytes;
}

Decision Dispatcher::decide(const GemmArgs& g) {
  const DispatchConfig cfg = config();
  Decision d;
  d.lt_policy = cfg.tuning ? LtPolicy::kAutotune : LtPolicy::kCached;
  if (recording_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(record_mutex_);
    recorded_.insert(shape_key(g));
  }
  request_table(g.device);
  const DeviceTable* t = table(g.device);
  if (!t || t->entries.empty()) {
    d.reason = "no table loaded for this GPU";
  } else {
    const DeviceInfo info = device_info(g.device);
    auto hit = t->entries.find(shape_key(g));
    if (hit != t->entries.end()) {
      d.entry = hit->second;
      if (!cfg.confirm_near_ties) d.entry.lt.rival_count = 0;
      if (hit->second.kernel == nullptr) {
        d.reason = "table: exact hit, cuBLASLt configuration";
      } else if (!cfg.kernels_enabled) {
        d.reason = "table kernels disabled (CUDAL2_DISABLE_KERNELS)";
      } else if (kernel_fits(hit->second, g, info.cc, info.sm_count)) {
        d.path = Path::kKernel;
        d.reason = "table: exact hit";
      } else {
        d.reason = "table hit, but its kernel cannot run this call (alignment, strides, bias or arch)";
      }
    } else {
      d.reason = "no table entry for this shape";
      apply_rules(*t, g, cfg.kernels_enabled ? info.cc : -1, info.sm_count, d);
    }
  }
  if (cfg.print_configs) log_once(g, d);
  return d;
}

void Dispatcher::apply_rules(const DeviceTable& t, const GemmArgs& g, int cc, int sm_count, Decision& d) const {
  const ShapeFamilyKey family{g.layout, g.dtype, g.n, g.k};
  if (t.rules.nearest_m_up && cc >= 0) {  // cc < 0: table kernels are disabled
    auto fam = t.tuned_m.find(family);
    if (fam != t.tuned_m.end()) {
      auto m_up = std::lower_bound(fam->second.begin(), fam->second.end(), g.m);
      if (m_up != fam->second.end()) {
        const TableEntry& e = t.entries.at(ShapeKey{g.layout, g.dtype, *m_up, g.n, g.k});
        if (kernel_fits(e, g, cc, sm_count)) {
          d.path = Path::kKernel;
          d.entry = e;
          d.reason = "table: nearest tuned M above";
          d.tuned_m = *m_up;
          return;
        }
      }
    }
  }
  const bool aligned = g.m % kMAlignment == 0;
  if (!(aligned ? t.rules.nearest_m_cublaslt_aligned : t.rules.nearest_m_cublaslt_unaligned)) return;
  auto fam = t.lt_tuned_m.find(family);
  if (fam == t.lt_tuned_m.end()) return;
  // The tuned M nearest g.m on a log scale (a tie goes to the larger M).
  auto above = std::lower_bound(fam->second.begin(), fam->second.end(), g.m);
  int64_t nearest;
  if (above == fam->second.end()) {
    nearest = fam->second.back();
  } else if (above == fam->second.begin()) {
    nearest = *above;
  } else {
    const int64_t below = *std::prev(above);
    nearest = static_cast<double>(*above) / g.m <= static_cast<double>(g.m) / below ? *above : below;
  }
  const TableEntry& e = t.entries.at(ShapeKey{g.layout, g.dtype, nearest, g.n, g.k});
  d.entry = TableEntry{};
  d.entry.has_lt = true;
  d.entry.lt.config = e.lt.config;  // its near-ties were measured for the tuned M, not this one: none are timed
  d.reason = aligned ? "table rule nearest_m_cublaslt (aligned M): cuBLASLt configuration of the nearest tuned M"
                    : "table rule nearest_m_cublaslt (unaligned M): cuBLASLt configuration of the nearest tuned M";
  d.tuned_m = nearest;
}

void Dispatcher::set_recording(bool on) {
  recording_ = on;
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<ShapeKey> Dispatcher::recorded(bool clear) {
  std::lock_guard<std::mutex> lock(record_mutex_);
  std::vector<ShapeKey> out(recorded_.begin(), recorded_.end());
  if (clear) recorded_.clear();
  return out;
}

void Dispatcher::log_once(const GemmArgs& g, const Decision& d) {
  std::ostringstream key;
  key << (g.layout == CUDAL2_NT ? "nt" : "nn") << '_' << (g.dtype == CUDAL2_BF16 ? "bf16" : "fp16") << '_' << g.m
      << '_' << g.n << '_' << g.k << (g.bias ? "_bias" : "") << "@cuda:" << g.device;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!logged_.emplace(key.str(), true).second) return;
  }
  const char* lt = d.entry.has_lt ? "cublaslt (table configuration)"
                   : d.lt_policy == LtPolicy::kAutotune ? "cublaslt (autotune)" : "cublaslt (heuristic or cached tune)";
  std::fprintf(stderr, "[cudal2] %s -> %s (%s", key.str().c_str(), d.path == Path::kKernel ? d.entry.kernel->name : lt,
               d.reason);
  if (d.tuned_m >= 0) std::fprintf(stderr, ": M=%lld", static_cast<long long>(d.tuned_m));
  std::fprintf(stderr, ")\n");
}

const Decision& Dispatcher::cached_decision(const GemmArgs& g, int* sm_count) {
  struct CachedDecision {
    LtPlanKey key{-1};
    uint64_t generation = 0;
    Decision decision;
    int sm_count = 0;
  };
  thread_local CachedDecision last;
  const LtPlanKey key = lt_plan_key(g);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (!(key == last.key && generation == last.generation)) {
    last.decision = decide(g);  // may load the table, which bumps the generation: cached under the one read before
    last.sm_count = device_info(g.device).sm_count;
    last.key = key;
    last.generation = generation;
  }
  *sm_count = last.sm_count;
  return last.decision;
}

bool Dispatcher::run(const GemmArgs& g) {
  int sm_count = 0;
  const Decision& d = cached_decision(g, &sm_count);
  const Workspace ws = workspace_for(g.device, g.stream);
  if (d.path == Path::kKernel) {
    const cudal2_problem p = make_problem(g, d.entry, ws, sm_count);
    if (d.entry.kernel->launch(&p) == CUDAL2_OK) return true;
    cudaGetLastError();  // clear a failed launch and fall back
  }
  return CublasLtGemm::instance().run(g, d.lt_policy, ws, d.entry.has_lt ? &d.entry.lt : nullptr);
}

}  // namespace cudal2
