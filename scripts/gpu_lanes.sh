#!/usr/bin/env bash
# scripts/gpu_check.sh stages in parallel lanes on one multi-GPU host, each lane on its own GPUs, OUT folder and
# KEEP folder, after one build:
#
#   scripts/gpu_lanes.sh OUT_DIR "GPUS:STAGE STAGE ..." ["GPUS:STAGE ..." ...]
#   e.g. scripts/gpu_lanes.sh /tmp/out "0,1,2:budget-hw" "3:judge-bench tune-grid gate"
#
# Lane i writes OUT_DIR/laneI (its summary.txt, logs and results) and keeps its results in ${KEEP_DIR}/laneI when
# KEEP_DIR is set (or where its own KEEP_DIR=... setting says), so a next call with the same lanes continues them.
# Environment variables reach every lane (per-lane settings: put them in the stage list as VAR=value words, e.g.
# "3:TUNED_DTYPES=fp16 bench-tuned").
# Timings are per GPU, so lanes do not disturb each other's figures beyond the shared host CPUs; each results file
# records the GPU it ran on. The last lines printed are every lane's summary. GPU_CHECK names the stage runner
# (default scripts/gpu_check.sh; the tests give a stand-in).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu_lanes.sh OUT_DIR "GPUS:STAGE ..." ...}
shift
[ $# -gt 0 ] || { echo "usage: scripts/gpu_lanes.sh OUT_DIR \"GPUS:STAGE ...\" ..." >&2; exit 2; }
mkdir -p "$OUT_DIR"
GPU_CHECK=${GPU_CHECK:-scripts/gpu_check.sh}
for spec in "$@"; do
  gpus=${spec%%:*}
  if [ "$gpus" = "$spec" ] || [ -z "$gpus" ] || [ -z "${spec#*:}" ]; then
    echo "lane '$spec': expected GPUS:STAGE ... (e.g. 0,1:budget-hw)" >&2
    exit 2
  fi
done
if [ ! -f build/install.stamp ]; then
  "$GPU_CHECK" "$OUT_DIR/build" build || exit 1
fi
lane=0
for spec in "$@"; do
  gpus=${spec%%:*}
  read -r -a items <<<"${spec#*:}"
  settings=(); stages=()
  for item in "${items[@]}"; do
    if [[ $item == *=* ]]; then settings+=("$item"); else stages+=("$item"); fi
  done
  (
    export CUDA_VISIBLE_DEVICES=$gpus
    [ -z "${KEEP_DIR:-}" ] || export KEEP_DIR="$KEEP_DIR/lane$lane"
    for setting in "${settings[@]}"; do export "${setting?}"; done
    "$GPU_CHECK" "$OUT_DIR/lane$lane" "${stages[@]}" >"$OUT_DIR/lane$lane.log" 2>&1
  ) &
  lane=$((lane + 1))
done
wait
for ((i = 0; i < lane; i++)); do
  echo "== lane $i ($(sed -n "$((i + 1))p" <<<"$(printf '%s\n' "$@")"))"
  grep -v "%|" "$OUT_DIR/lane$i/summary.txt" 2>/dev/null | tail -n 20
done
