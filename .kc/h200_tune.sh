#!/usr/bin/env bash
# Session 12, 4 x H200 (or whatever came): build, then the whole grid tuned in 4 lanes, the full GPU tests after the
# LLM fp16 lane; then the lanes' tunings merged.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d build/kernel_cache ] || { cat .kc/kc.tgz.* | tar xzf -; }
export CUDAL2_COMMIT=${CUDAL2_COMMIT:-unknown} KEEP_DIR=/tmp/keep
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv > $OUT/gpu_identity.csv 2>&1
n=$(nvidia-smi -L | wc -l)
if [ "$n" -ge 4 ]; then
  STAGE_TIMEOUT=480 scripts/gpu_lanes.sh $OUT/lanes "0:TUNE_SHAPES=g1000 TUNE_DTYPES=fp16 tune-grid" \
    "1:TUNE_SHAPES=g1000 TUNE_DTYPES=bf16 tune-grid" "2:TUNE_SHAPES=llm TUNE_DTYPES=fp16 tune-grid tests" \
    "3:TUNE_SHAPES=llm TUNE_DTYPES=bf16 tune-grid"
  parts="$OUT/lanes/lane0/tune_grid.json $OUT/lanes/lane1/tune_grid.json $OUT/lanes/lane2/tune_grid.json $OUT/lanes/lane3/tune_grid.json"
else
  STAGE_TIMEOUT=480 scripts/gpu_lanes.sh $OUT/lanes "0:TUNE_SHAPES=g1000 TUNE_DTYPES=fp16 tune-grid" \
    "1:TUNE_SHAPES=g1000 TUNE_DTYPES=bf16 tune-grid"
  parts="$OUT/lanes/lane0/tune_grid.json $OUT/lanes/lane1/tune_grid.json"
fi
TUNE_PARTS="$parts" scripts/gpu_check.sh $OUT/merged tune-merge
find $OUT -name "*.so" -delete
cat $OUT/merged/summary.txt
