#!/usr/bin/env bash
# A GPU's searched table in three calls of a warm multi-GPU host (issue 26), each case (fp16/bf16 x NN/NT) on its own
# GPU; KEEP (default /tmp/keep) carries the stores and results from call to call:
#
#   scripts/search_table.sh search   # build; the rl policy warm-started searches the G1000 + LLM problems below
#                                    # 2^$SEARCH_MAX_LOG2_MNK (32), smallest first, for $SEARCH_MINUTES (default: what
#                                    # the call's $CALL_S leaves); again to resume every store for that much more;
#                                    # SEARCH_RESUME_FROM=benchmarks/results/<gpu_slug> resumes the committed stores
#                                    # (search_table_*_<dtype>_<layout>.sqlite.gz, of each case the one with the
#                                    # most evaluations: the latest snapshot of the run)
#                                    # (SEARCH_PER_ROUND, SEARCH_MAX_BUILDS, SEARCH_WINS_FIRST_FROM, e.g. the other
#                                    # GPU's stores, whose wins go first: scripts/gpu_check.sh, stage search-table)
#   scripts/search_table.sh check    # the finds (kernels the stores measured under the bar) the library lacks: built
#                                    # alone, GPU-tested, sanitized; the problems with finds re-tuned with them
#                                    # (tune_grid --sweep-problems-only), the tuner choosing among the table's entry,
#                                    # the finds and every cuBLASLt candidate; CHECK_FAMILIES (e.g. tiny, after a
#                                    # header edit) GPU-tested and sanitized on the last GPU meanwhile, for the gate
#   scripts/search_table.sh bench    # the tunings merged, the sanitizer gate, the table installed and rebuilt; the
#                                    # searched problems in kernel mode with the new table
#   scripts/search_table.sh bench-old  # the same problems with the committed table (a next call's checkout has it
#                                    # again; the library built for the new table holds its kernels unless the new
#                                    # table dropped one, which that benchmark's failed rows would show)
#
# Before a search call on a machine that starts bare, `python -m search prebuild --store <the stores it resumes>
# --artifacts build/search` on the CPU machine builds their earlier builds there; carried with the call (build/search, or
# the object cache build/kernel_cache), they spare the GPU machine their rebuild (docs/DECISIONS.md, 2026-11-27).
# Then, on the CPU machine: the stores and the merged tuning committed under benchmarks/results/<gpu_slug>/, the tuning
# added to search/table_sources.py, `python -m search.table_sources <gpu_slug>`, and `python -m studies.table_change`
# on the two benchmarks. With fewer than four GPUs the cases run in turns; TABLE_CASES (default "fp16_nn fp16_nt bf16_nn
# bf16_nt") limits a step to some of them, so that a one-GPU call can give its whole time to one case (each case keeps
# its store in KEEP/search/<case>, and each turn of lanes writes under <step folder>/<its cases joined by +>/laneI, the
# same case in the same place whichever turn or lane runs it). Each step ends with what it wrote or changed
# in KEEP packed into $OUT/keep_<step>.tgz (a lent machine's way back; unpack the steps' archives in order), also when
# it fails or is stopped (SIGTERM or SIGINT, e.g. a call's time limit): a cut search's stores still come back.
# TABLE_GPU (e.g. H100) names the GPU model a step is meant for: on a machine of another model (a lent multi-GPU kind
# may come as H200s when H100s were asked for) the step stops at once with exit status 3, before the build.
set -uo pipefail
cd "$(dirname "$0")/.."
STEP=${1:?usage: scripts/search_table.sh search|check|bench|bench-old}
if [ -n "${TABLE_GPU:-}" ]; then
  model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  case $model in
    *"$TABLE_GPU"*) ;;
    *) echo "TABLE_GPU=$TABLE_GPU: this machine's GPU is ${model:-unknown}; stopping before the build" >&2; exit 3 ;;
  esac
fi
export KEEP=${KEEP:-/tmp/keep} PYTHONUNBUFFERED=1
mkdir -p "$KEEP"
touch "$KEEP/.began_$STEP"  # what this step writes or changes is newer (its archive holds only that)
t0=$SECONDS
pack_keep() {  # what the step wrote or changed in KEEP, into $OUT/keep_$STEP.tgz
  [ -z "${OUT:-}" ] || (cd "$KEEP" && find . -type f -newer ".began_$STEP" ! -name "*.so" ! -name "*.lock" \
    ! -name built ! -name ".began_*" -print0 | tar czf "$OUT/keep_$STEP.tgz" --null -T -)
}
trap pack_keep EXIT
trap 'echo "step $STEP stopped at $((SECONDS - t0)) s" >&2; exit 143' TERM INT
left() { echo $(( ${CALL_S:-570} - (SECONDS - t0) )); }
export GPU_CHECK=${GPU_CHECK:-scripts/gpu_check.sh}  # the stage runner (the tests give a stand-in)
[ -f "$KEEP/built" ] || { "$GPU_CHECK" "$KEEP/build" build && touch "$KEEP/built"; } || exit 1
SLUG=${GPU_SLUG:-$(python3 -c "import torch; from cudal2_ops.tables import gpu_slug
print(gpu_slug(torch.cuda.get_device_name(0)))")}
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
CASES=()
for wanted in ${TABLE_CASES:-fp16_nn fp16_nt bf16_nn bf16_nt}; do
  case $wanted in
    fp16_nn | fp16_nt | bf16_nn | bf16_nt) CASES+=("${wanted/_/ }") ;;
    *) echo "TABLE_CASES: unknown case $wanted (fp16_nn, fp16_nt, bf16_nn or bf16_nt)" >&2; exit 2 ;;
  esac
done
PASSES=$(( (${#CASES[@]} + GPUS - 1) / GPUS ))  # turns of lanes when there are fewer GPUs than cases
echo "$SLUG, $GPUS GPUs, built at $((SECONDS - t0)) s"

in_lanes() {  # in_lanes OUT_DIR PREFIX STAGE [KEEP_ROOT]: STAGE for every case in turns of GPUS lanes, PREFIX
  # (..._DTYPE[S]) and its _LAYOUT[S] set per lane; a turn writes OUT_DIR/<its cases joined by +>/laneI; with KEEP_ROOT
  # each case keeps its results in KEEP_ROOT/<case> (the stage's KEEP_DIR)
  local out=$1 prefix=$2 stage=$3 keep_root=${4:-} first specs i name keep
  for ((first = 0; first < ${#CASES[@]}; first += GPUS)); do
    specs=(); name=""
    for ((i = first; i < first + GPUS && i < ${#CASES[@]}; i++)); do
      read -r dtype layout <<<"${CASES[$i]}"
      keep=""; [ -z "$keep_root" ] || keep="KEEP_DIR=$keep_root/${dtype}_$layout "
      specs+=("$((i - first)):$keep${prefix}=$dtype ${prefix/DTYPE/LAYOUT}=$layout $stage")
      name+="${name:++}${dtype}_$layout"
    done
    scripts/gpu_lanes.sh "$out/$name" "${specs[@]}"
  done
}

bench_table() {  # bench_table OUT_DIR: the searched problems in kernel mode with the table in this checkout
  TUNED_BELOW=${SEARCH_MAX_LOG2_MNK:-32} TUNED_TABLE=kernels/sm90/$SLUG.json in_lanes "$1" TUNED_DTYPES bench-tuned
}

latest_store() {  # latest_store DIR CASE: DIR's committed store of CASE (e.g. fp16_nt) with the most evaluations (a
  # resumed run's later snapshot holds every row of the earlier ones; the names sort by commit within a day, not by time)
  python3 - "$@" <<'PY'
import sys
from pathlib import Path

from search.store import read_store


def evaluations(path):
    with read_store(path) as store:
        return store.query("SELECT COUNT(*) FROM evaluations")[0][0]


stores = sorted(Path(sys.argv[1]).glob(f"*_{sys.argv[2]}.sqlite.gz"))
print(max(stores, key=evaluations) if stores else "")
PY
}

case $STEP in
  search)
    for ((i = 0; i < ${#CASES[@]}; i++)); do  # stores an earlier session committed, resumed (SEARCH_RESUME_FROM)
      read -r dtype layout <<<"${CASES[$i]}"
      store=$KEEP/search/${dtype}_$layout/search_${dtype}_$layout.sqlite
      earlier=""
      [ ! -d "${SEARCH_RESUME_FROM:-/nonexistent}" ] || earlier=$(latest_store "$SEARCH_RESUME_FROM" "${dtype}_$layout")
      [ -f "$store" ] || [ -z "$earlier" ] || { mkdir -p "$(dirname "$store")" && gunzip -c "$earlier" >"$store"; }
    done
    # minutes per turn of lanes: the call's time less 90 s (the summaries, the archive) and 30 s a turn (each stage's
    # start-up beyond its budget: Python, the warm start's fit, the judge; 28 s on one H100, the four cases in turns)
    share=$(python3 -c "print(round(($(left) - 90 - 30 * $PASSES) / 60 / $PASSES, 1))")
    export SEARCH_MINUTES=${SEARCH_MINUTES:-$share}
    in_lanes "$KEEP/s" SEARCH_DTYPE search-table "$KEEP/search" ;;
  check)
    TUNE_SWEEPS="$(find "$KEEP/search" -name 'search_*.sqlite' | sort | tr '\n' ' ')"
    export TUNE_SWEEPS
    if [ -n "${CHECK_FAMILIES:-}" ]; then  # a header edit's families, on the last GPU while the first checks the finds
      CUDA_VISIBLE_DEVICES=$((GPUS - 1)) STAGE_TIMEOUT=240 "$GPU_CHECK" "$KEEP/families" family-check &
    fi
    CUDA_VISIBLE_DEVICES=0 MAX_JOBS=${MAX_JOBS:-48} STAGE_TIMEOUT=200 "$GPU_CHECK" "$KEEP/finds" new-kernels
    wait  # the tuning's timings start with every GPU free
    [ ! -f build/new_kernels.so ] || export CUDAL2_KERNEL_LIBS=build/new_kernels.so
    TUNE_SHAPES=g1000,llm TUNE_MAX_LOG2_MNK=${SEARCH_MAX_LOG2_MNK:-32} TUNE_SWEEP_PROBLEMS_ONLY=1 \
      TUNE_BUDGET_S=$(( ($(left) - 60) / PASSES )) in_lanes "$KEEP/tune" TUNE_DTYPES tune-grid ;;
  bench)
    TUNE_PARTS="$(find "$KEEP/tune" -name tune_grid.json | sort | tr '\n' ' ')" "$GPU_CHECK" "$KEEP/table" tune-merge
    cp "$KEEP"/finds/*sanitize*.json "$KEEP"/families/*sanitize*.json "$KEEP/table/" 2>/dev/null
    "$GPU_CHECK" "$KEEP/table" gate
    cp "$KEEP/table/$SLUG.json" "kernels/sm90/$SLUG.json"
    finds=$(sed -n 's/^new-kernels: //p' "$KEEP/finds/summary.txt" 2>/dev/null | grep -v '^none' | tr , ' ')
    [ -z "$finds" ] || python3 -m cudal2_catalog.codegen --names $finds >"$KEEP/table/codegen.log" 2>&1
    "$GPU_CHECK" "$KEEP/table" build || exit 1
    bench_table "$KEEP/bench_new" ;;
  bench-old)  # the committed table (this call's checkout) on the same problems, with the library bench built
    bench_table "$KEEP/bench_old" ;;
  *) echo "unknown step $STEP (search, check, bench or bench-old)" >&2; exit 2 ;;
esac
echo "step $STEP done at $((SECONDS - t0)) s"
find "$KEEP" -name summary.txt | sort | while read -r f; do
  echo "== $f"; grep -v "%|" "$f" | tail -n 8 | cut -c1-300
done
