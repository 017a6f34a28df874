#!/usr/bin/env bash
# Session 12, H100: PART=1 build + targeted GPU tests + tune G1000 fp16; PART=2 tune G1000 bf16 + LLM, merge.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:?part}
export KEEP=/tmp/keep; mkdir -p $KEEP
[ -d build/kernel_cache ] || { cat .kc/kc.tgz.* | tar xzf -; }
export CUDAL2_COMMIT=${CUDAL2_COMMIT:-unknown}
nvidia-smi --query-gpu=name,uuid,serial,pci.bus_id --format=csv > $OUT/gpu_identity_part$PART.csv 2>&1
if [ "$PART" = 1 ]; then
  scripts/gpu_check.sh $KEEP/build build
  CUDAL2_TEST_KERNEL_LIB=cudal2_ops/libcudal2_kernels.so timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_tune_gpu.py \
    tests/gpu/test_offgrid_rule_gpu.py --no-header -rfE --durations=10 > $OUT/gpu_tests_tune.txt 2>&1
  tail -5 $OUT/gpu_tests_tune.txt
  TUNE_SHAPES=g1000 TUNE_DTYPES=fp16 STAGE_TIMEOUT=330 scripts/gpu_check.sh $KEEP/t_g1000_fp16 tune-grid
else
  TUNE_SHAPES=g1000 TUNE_DTYPES=bf16 STAGE_TIMEOUT=285 scripts/gpu_check.sh $KEEP/t_g1000_bf16 tune-grid
  TUNE_SHAPES=llm STAGE_TIMEOUT=285 scripts/gpu_check.sh $KEEP/t_llm tune-grid
  TUNE_PARTS="$KEEP/t_g1000_fp16/tune_grid.json $KEEP/t_g1000_bf16/tune_grid.json $KEEP/t_llm/tune_grid.json" \
    scripts/gpu_check.sh $KEEP/merged tune-merge
fi
tar czf $OUT/keep_part$PART.tgz -C $KEEP --exclude="*.so" .
cat $KEEP/*/summary.txt 2>/dev/null | grep -v "%|" | tail -30
