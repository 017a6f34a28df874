// The dispatcher: per call, the table's choice (a kernel, or a measured cuBLASLt configuration; exact hit, or a
// nearest-M rule the table allows) else cuBLASLt's heuristic (or its autotuned algorithm with CUDAL2_TUNE=1).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cublaslt_gemm.h"
#include "gemm_args.h"

namespace cudal2 {

// One problem's entry: a kernel with its knobs, and/or the measured cuBLASLt choice (what runs when there is no
// kernel, or the kernel cannot take a particular call), with its near-ties.
struct TableEntry {
  const cudal2_kernel* kernel = nullptr;
  int splits = 0, swizzle = 0, raster = 0;
  bool has_lt = false;
  LtTableChoice lt;
};

// Misses are split by M's alignment (cudal2_ops.tables.M_ALIGNMENT): cuBLASLt's heuristic choice for M % 8 != 0 is
// of another kind, so the nearest-M cuBLASLt rule is measured and enabled per class.
constexpr int64_t kMAlignment = 8;

// Rules for problems the table does not list, enabled per table by measurements (the table header's "rules").
struct TableRules {
  bool nearest_m_up = false;  // a kernel entry of the smallest tuned M' >= M with the same (layout, dtype, N, K)
  // The cuBLASLt configuration of the tuned M' nearest M (log scale) with the same (layout, dtype, N, K), for misses
  // whose M is aligned (M % kMAlignment == 0) / unaligned.
  bool nearest_m_cublaslt_aligned = false;
  bool nearest_m_cublaslt_unaligned = false;
};

enum class Path { kKernel, kCublasLt };

struct Decision {
  Path path = Path::kCublasLt;
  TableEntry entry;
  LtPolicy lt_policy = LtPolicy::kCached;
  const char* reason = "";  // static text: decisions are made per call and must not allocate
  int64_t tuned_m = -1;     // the table entry's M when the nearest-M rule chose it
};

struct DispatchConfig {
  bool kernels_enabled = true;  // CUDAL2_DISABLE_KERNELS=1 turns table kernels off
  bool tuning = false;          // CUDAL2_TUNE=1: autotune cuBLASLt on a miss
  bool print_configs = false;   // CUDAL2_PRINT_CONFIGS=1: log each new decision once
  // CUDAL2_CONFIRM_NEAR_TIES=1 turns it on: an exact hit's cuBLASLt near-ties are timed at its first eager call
  // (off by default: on two H100s it ran at 0.998-1.000 of the entry as shipped, benchmarks/results/
  // nvidia_h100_80gb_hbm3/g1000_sample500_kernel_2026-11-26_6c1e706_bf16_*.md)
  bool confirm_near_ties = false;
};

class Dispatcher {
 public:
  static Dispatcher& instance();

  // Replaces the table of `device`, with the rules its measurements validated for misses.
  void set_table(int device, const std::vector<std::pair<ShapeKey, TableEntry>>& entries, const TableRules& rules);
  size_t table_size(int device) const;

  // Called once per device, before its first decision, to install that device's table (from Python).
  void set_table_loader(std::function<void(int)> loader);

  void set_config(const DispatchConfig& config);
  DispatchConfig config() const;

  Decision decide(const GemmArgs& g);

  // decide(g), reused from this thread's previous call when nothing it depends on changed: the table, the config and
  // what lt_plan_key holds (shape, strides, dtype, layout, bias, pointer alignments up to 16 bytes, device), i.e.
  // everything a kernel's can_implement reads. So a model's repeated calls skip the table lookup and the kernel's
  // can_implement / workspace queries. `sm_count` receives the device's SM count.
  const Decision& cached_decision(const GemmArgs& g, int* sm_count);

  // Runs g on g.stream with cached_decision(g); false when neither a kernel nor cuBLASLt can (the caller then uses
  // torch).
  bool run(const GemmArgs& g);

  // Recording: while on, every problem a decision is made for (eager, compiled, or while a CUDA graph is captured) is
  // remembered, for tuning a model's problems offline. Turning it on expires cached decisions so none is missed.
  void set_recording(bool on);
  std::vector<ShapeKey> recorded(bool clear);

 private:
  struct ShapeFamilyKey {
    int32_t layout, dtype;
    int64_t n, k;
    bool operator==(const ShapeFamilyKey& o) const {
      return layout == o.layout && dtype == o.dtype && n == o.n && k == o.k;
    }
  };
  struct ShapeFamilyHash {
    size_t operator()(const ShapeFamilyKey& s) const { return ShapeKeyHash()(ShapeKey{s.layout, s.dtype, 0, s.n, s.k}); }
  };
  struct DeviceTable {
    std::unordered_map<ShapeKey, TableEntry, ShapeKeyHash> entries;
    std::unordered_map<ShapeFamilyKey, std::vector<int64_t>, ShapeFamilyHash> tuned_m;     // sorted
    std::unordered_map<ShapeFamilyKey, std::vector<int64_t>, ShapeFamilyHash> lt_tuned_m;  // sorted, has_lt only
    TableRules rules;
  };

  const DeviceTable* table(int device) const;
  void request_table(int device);
  bool kernel_fits(const TableEntry& entry, const GemmArgs& g, int cc, int sm_count) const;
  void log_once(const GemmArgs& g, const Decision& d);
  // The nearest-M rules' choice for a miss (updates d when one applies).
  void apply_rules(const DeviceTable& t, const GemmArgs& g, int cc, int sm_count, Decision& d) const;

  static constexpr int kMaxDevices = 64;
  mutable std::mutex mutex_;  // guards writers and the logging/loader state; decisions read lock-free
  // Installed tables, read lock-free; replaced ones stay alive in `retired_` (tables change rarely and are small).
  std::atomic<const DeviceTable*> tables_[kMaxDevices] = {};
  std::vector<std::unique_ptr<const DeviceTable>> retired_;
  std::atomic<bool> kernels_enabled_{true}, tuning_{false}, print_configs_{false}, confirm_near_ties_{false};
  std::unordered_map<std::string, bool> logged_;
  std::function<void(int)> table_loader_;
  std::unordered_map<int, bool> table_requested_;
  std::atomic<uint64_t> requested_mask_{0};  // lock-free "already requested" for devices 0..63
  std::atomic<uint64_t> generation_{0};       // bumped by every table or config change: cached decisions expire
  std::atomic<bool> recording_{false};
  std::mutex record_mutex_;
  std::unordered_set<ShapeKey, ShapeKeyHash> recorded_;
};

// The problem descriptor a table kernel receives for g with the entry's knobs.
cudal2_problem make_problem(const GemmArgs& g, const TableEntry& e, const Workspace& ws, int sm_count);

}  // namespace cudal2
