// cuBLASLt algorithm <-> configuration attributes.
#include "cublaslt_config.h"

#include <sstream>

#include "cudal2/abi.h"

namespace cudal2 {
namespace {

// Each field's attribute and storage size in cublasLtMatmulAlgoConfigAttributes_t (cuBLASLt checks the size).
struct FieldSpec {
  const char* name;
  cublasLtMatmulAlgoConfigAttributes_t attr;
  size_t bytes;
};

constexpr std::array<FieldSpec, LtConfig::kFields> kSpecs{{
    {"algo_id", CUBLASLT_ALGO_CONFIG_ID, sizeof(int32_t)},
    {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, sizeof(uint32_t)},
    {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, sizeof(uint32_t)},
    {"split_k", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sizeof(int32_t)},
    {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, sizeof(uint32_t)},
    {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sizeof(uint32_t)},
    {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, sizeof(uint32_t)},
    {"inner_shape", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, sizeof(uint16_t)},
    {"cluster_shape", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, sizeof(uint16_t)},
}};

int64_t get_field(const cublasLtMatmulAlgo_t& algo, const FieldSpec& spec) {
  if (spec.bytes == sizeof(uint16_t)) {
    uint16_t v = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, spec.attr, &v, sizeof(v), nullptr);
    return v;
  }
  if (spec.attr == CUBLASLT_ALGO_CONFIG_ID || spec.attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM) {
    int32_t v = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, spec.attr, &v, sizeof(v), nullptr);
    return v;
  }
  uint32_t v = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, spec.attr, &v, sizeof(v), nullptr);
  return v;
}

bool set_field(cublasLtMatmulAlgo_t* algo, const FieldSpec& spec, int64_t value) {
  if (spec.bytes == sizeof(uint16_t)) {
    if (value < 0 || value > 0xffff) return false;
    const uint16_t v = static_cast<uint16_t>(value);
    return cublasLtMatmulAlgoConfigSetAttribute(algo, spec.attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
  }
  if (value < INT32_MIN || value > int64_t{UINT32_MAX}) return false;
  const uint32_t v = static_cast<uint32_t>(value);  // int32 fields (split_k) share the bit pattern
  return cublasLtMatmulAlgoConfigSetAttribute(algo, spec.attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const std::array<const char*, LtConfig::kFields>& lt_config_field_names() {
  static const std::array<const char*, LtConfig::kFields> names = [] {
    std::array<const char*, LtConfig::kFields> out{};
    for (int i = 0; i < LtConfig::kFields; ++i) out[i] = kSpecs[i].name;
    return out;
  }();
  return names;
}

std::string LtConfig::str() const {
  std::ostringstream s;
  for (int i = 0; i < kFields; ++i) s << (i ? " " : "") << kSpecs[i].name << '=' << fields[i];
  return s.str();
}

LtConfig config_of(const cublasLtMatmulAlgo_t& algo) {
  LtConfig c;
  for (int i = 0; i < LtConfig::kFields; ++i) c.fields[i] = get_field(algo, kSpecs[i]);
  return c;
}

bool algo_from_config(cublasLtHandle_t handle, int dtype, const LtConfig& config, cublasLtMatmulAlgo_t* algo) {
  const cudaDataType_t type = dtype == CUDAL2_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  if (config.algo_id() < 0 || config.algo_id() > INT32_MAX) return false;
  if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, type, type, type, type,
                             static_cast<int>(config.algo_id()), algo) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  for (int i = 1; i < LtConfig::kFields; ++i) {  // the id is set by AlgoInit (read-only)
    if (!set_field(algo, kSpecs[i], config.fields[i])) return false;
  }
  return config_of(*algo) == config;  // every attribute took: the algorithm is the recorded one
}

}  // namespace cudal2
