#!/usr/bin/env bash
# Session 12, H100: the committed (re-tuned, near-ties) table benchmarked as a user's process runs it: G1000 kernel
# mode, PDL off, cudal2 against the same-layout cuBLASLt-autotune bars and their repeats. $1: layouts (nt or nn),
# $2: dtype. Continues a results file kept on the warm machine.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d build/kernel_cache ] || { cat .kc/kc.tgz.* | tar xzf -; }
export CUDAL2_COMMIT=${CUDAL2_COMMIT:-unknown} KEEP=/tmp/keep; mkdir -p $KEEP
nvidia-smi --query-gpu=name,uuid,serial,pci.bus_id --format=csv > $OUT/gpu_identity_$1_$2.csv 2>&1
[ -f build/install.stamp ] && python3 -m build_tools.install_stamp check >/dev/null 2>&1 || { scripts/gpu_check.sh $KEEP/build build; cp -r $KEEP/build $OUT/; }
CUDAL2_TABLE=${BENCH_TABLE:-kernels/sm90/nvidia_h100_80gb_hbm3.json} CUDAL2_DISABLE_PDL=1 timeout ${STAGE_S:-540} python3 -m benchmarks.grid \
  --shapes ${SHAPES:-g1000} --layouts $1 --dtypes $2 --modes kernel --resume --out $KEEP/${SHAPES:-g1000}_kernel_$2_${1/,/_}.json \
  --impls cudal2,cublaslt-autotune-nn,cublaslt-autotune-tn,cublaslt-autotune-nn-repeat,cublaslt-autotune-tn-repeat \
  > $KEEP/bench_$2_$1.log 2>&1
echo "bench rc=$?"; tail -3 $KEEP/bench_$2_$1.log
[ -z "${BENCH_TABLE:-}" ] || cp $BENCH_TABLE $OUT/bench_table.json; cp $KEEP/${SHAPES:-g1000}_kernel_$2_${1/,/_}.json $KEEP/bench_$2_$1.log $OUT/
