// A cuBLASLt algorithm as data: the configuration attributes that identify it (algorithm id, tile, stages, split-K,
// reduction scheme, swizzle, custom option, inner shape, cluster shape), so tables can ship a measured choice and
// rebuild the algorithm on the user's machine, where cublasLtMatmulAlgoCheck confirms it runs the problem.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <string>

namespace cudal2 {

struct LtConfig {
  static constexpr int kFields = 9;
  // In this order: algo_id, tile, stages, split_k, reduction, swizzle, custom, inner_shape, cluster_shape.
  std::array<int64_t, kFields> fields{};

  int64_t algo_id() const { return fields[0]; }
  int64_t split_k() const { return fields[3]; }
  int64_t reduction() const { return fields[4]; }
  bool operator==(const LtConfig& o) const { return fields == o.fields; }
  bool operator!=(const LtConfig& o) const { return !(*this == o); }
  std::string str() const;  // "algo=.. tile=.. ..." for messages
};

// The field names of LtConfig, in order (the table's JSON keys).
const std::array<const char*, LtConfig::kFields>& lt_config_field_names();

// The configuration of an algorithm returned by the heuristic.
LtConfig config_of(const cublasLtMatmulAlgo_t& algo);

// Builds the algorithm of `config` for fp32-compute GEMMs of `dtype` operands (cudal2_dtype). False when cuBLASLt
// rejects the id or an attribute (e.g. a configuration recorded with another cuBLASLt version); whether it can run a
// given problem is cublasLtMatmulAlgoCheck's call.
bool algo_from_config(cublasLtHandle_t handle, int dtype, const LtConfig& config, cublasLtMatmulAlgo_t* algo);

}  // namespace cudal2
