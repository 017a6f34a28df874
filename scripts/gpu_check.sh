#!/usr/bin/env bash
# One step of GPU work on a lent H100/H200, in one go: build, GPU tests, benchmarks, fuzz, sanitizer, e2e.
#
#   scripts/gpu_check.sh OUT_DIR STAGE [STAGE ...]
#
# Stages: build, tests, latency, protocol (G1000 sample100 kernel mode three ways: replays of about 1 ms, replays of
# about 0.03 ms (a few calls, as an independent harness runs them), and PDL off; $PROTOCOL_IMPLS), small (offline mode on
# G1000 shapes with M*N*K < 2^30, kernel mode below 2^32), search (python -m search run with the RL policy warm-started, then random search at the same
# evaluation budget, SEARCH_PER_PROBLEM (16) per problem of SEARCH_SHAPES (sample20), into OUT_DIR/search.sqlite, the two
# runs within SEARCH_MINUTES (4) together; SEARCH_MAX_BUILDS (0: built kernels and their knobs only, no nvcc on the GPU's
# clock; prepare builds ahead with `python -m search run --compile-only`); then the run report and its throughput rows),
# search-table (one dtype and layout of a searched table, continued from KEEP_DIR: see the stage), search-emit (the searched
# table and kernel sources from that store, then a rebuild), new-kernels (the kernels $TUNE_SWEEPS measured faster than
# cuBLASLt-autotune that the library lacks, or $NEW_KERNELS: built alone into build/new_kernels.so, GPU-tested, sanitized;
# CUDAL2_KERNEL_LIBS=build/new_kernels.so lets tune-grid time them), sweep, sweep-cold, fuzz, sanitize (compute-sanitizer memcheck of every library kernel, or of $SANITIZE_FAMILIES /
# $SANITIZE_SAMPLE of them, or with SANITIZE_WITHHELD=1 of those the shipped table's sanitizer gate withheld, and racecheck of $SANITIZE_RACECHECK, default tiny),
# family-check (a header edit's families, $CHECK_FAMILIES: their GPU tests and sanitizer report), bench-kernel,
# bench-after (G1000 sample100 in kernel mode back to back and after a non-GEMM kernel that writes A, PDL off then on:
# g1000_after_pdl0.json / g1000_after_pdl1.json), bench-offline, bench-server, bench-llm, decode-bw,
# e2e, e2e-lowering (compiled decode with cudal2's Inductor lowerings on, then off; Inductor caches off), e2e-trace
# (kernels and host ops per step, unpatched vs patched, compiled), candidates (kernel configs named in $CANDIDATES,
# comma-separated, not yet built: generated, built into build/candidates.so, GPU-tested, sanitized, then swept with cold
# weights beside every built kernel on LLM problems with $CANDIDATES_MIN_M <= M <= $CANDIDATES_MAX_M (or on the
# problems $CANDIDATES_SWEEP_ARGS names, e.g. "--sample 200 --llm-max-m 0" for a warm G1000 sample), and judged by
# studies.candidate_report), reference (sm90 vs cuBLASLt-autotune at 4096^3 / 8192^3), reference-nopdl (the same without PDL), table (the
# table from OUT_DIR/sweep.json, merged with OUT_DIR/sweep_cold.json when present, then a rebuild that compiles any
# kernel it names). sweep-cold re-sweeps M <= 64 with cold weights (the decode regime). The sweep runs with PDL off
# (CUDAL2_DISABLE_PDL=0 in the environment keeps it on), as tables are selected from such sweeps; so do
# bench-kernel and bench-llm, whose kernel-mode figures are the headline (docs/EVALUATION.md: back-to-back replays
# with PDL overstate small problems).
# tune-grid (scripts/tune_grid.py: the measured choice for every G1000 and LLM problem, $TUNE_LAYOUTS (NN,NT), $TUNE_DTYPES, into
# OUT_DIR/<gpu_slug>.json; $TUNE_SWEEPS, sweep files and search stores (any GPU's) whose fastest kernels per problem are timed too;
# $TUNE_MIN_LOG2_MNK / $TUNE_MAX_LOG2_MNK, only problems above / up to that size, the base table's ($TUNE_BASE, default
# the committed table; OUT_DIR's own table to tune it in parts) entries kept for the rest; $TUNE_BUDGET_S, no problem started after that; $TUNE_MISSING_ONLY=1, only problems the base table lacks; $TUNE_SWEEP_PROBLEMS_ONLY=1, only problems where $TUNE_SWEEPS found a kernel under the bar; $TUNE_PROBLEMS_FROM, only the table keys that file lists (studies.table_drift --losses-out); $TUNE_GRID_UP_TO, every kernel at each knob
# variant on problems up to that size; $TUNE_KNOBS_FROM, the table's and the sweeps' kernels at each knob variant above it), offgrid (scripts/check_offgrid_rule.py on that table, --apply), route (the cuBLASLt route's
# cost: benchmarks.lt_route_overhead), consistency (benchmarks.lt_candidate_consistency: the tuner's and the benchmark's
# timing of every cuBLASLt candidate of the problems the tuner mis-timed), gate (the sanitizer gate on OUT_DIR's table, with OUT_DIR's sanitizer
# reports beside the committed ones: run it before bench-tuned), profile (benchmarks.profile_small: Nsight
# Compute on the floor kernel, cuBLASLt-autotune and the best tiny kernel of a few small problems), bench-tuned (G1000 and LLM kernel mode with that table against the same-layout
# cuBLASLt-autotune and its independent repeat, $TUNED_IMPLS, PDL off; $TUNED_BELOW, only problems below that log2(MNK); $TUNED_DTYPES, $TUNED_LAYOUTS (one lane per
# dtype and layout on a multi-GPU host), $TUNED_TABLE (another table), $TUNED_PROBLEMS_FROM (only the shapes whose table keys that file lists); a results file already in OUT_DIR is continued,
# so a run cut by the stage limit goes on in the next call), tune-merge (the lanes' tunings as one table, $TUNE_PARTS). tiny (the tiny family's GPU tests on the installed library, then a sweep of the G1000
# problems up to 2^26 with every built kernel, PDL off, into OUT_DIR/sweep_tiny.json, $SWEEP_BUDGET_S default 120),
# floors (python -m benchmarks.latency_floor: an empty kernel and a read-A-and-B-write-C kernel beside
# cuBLASLt-autotune and the best tiny kernel on the G1000 problems up to 2^26, PDL off, into OUT_DIR/latency_floor.json,
# smallest first within $FLOORS_BUDGET_S, default 360),
# budget-hw (python -m studies.budget_hardware: sweep, random, rl and rl warm-started from the other GPU model's sweeps
# at 16 evaluations per problem on a G1000 sample100 and the LLM decode shapes, judged live on every visible GPU,
# continued in the next call from KEEP_DIR's stores; $BUDGET_HW_MINUTES, $BUDGET_HW_TIMEOUT, $BUDGET_HW_ARGS),
# judge-bench (python -m search.judge_bench: the judge's evaluations per minute and its verdicts on the kernels an
# earlier judge flagged wrongly, then the judge's GPU tests).
# Logs and results go under OUT_DIR (one file per stage); the last lines printed are a compact summary. KEEP_DIR (e.g.
# /tmp/keep) carries OUT_DIR's results files from one call to the next on a warm machine.
# Offline machines: carry wheels in .whl/ (nvidia-cutlass) and the kernel object cache build/kernel_cache/
# (scripts/prebuild_kernels.sh builds it on a machine without a GPU). A lent machine takes 64 MiB per call: unzip the
# nvidia-cutlass wheel, drop cutlass_library/source/{examples,tools/profiler,tools/library}, `python -m wheel pack` it
# (4.1 of 6.2 MB; same name and version, so the kernel cache keys hold). The tracked tree is about 60 MiB (results):
# carry only the cache objects the build uses (a cache built by prebuild_kernels.sh for the current kernel set; objects
# of other kernels dropped), and run `scripts/device_slim.sh out` before the calls (the tracked results no stage reads
# leave the working tree: about 22 MiB remain) and `scripts/device_slim.sh back` after. Git's HEAD there is the session's first
# commit, whatever the working tree holds: pass CUDAL2_COMMIT=$(git rev-parse --short HEAD) from this side.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu_check.sh OUT_DIR STAGE...}
shift
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
SUMMARY="$OUT_DIR/summary.txt"
# the sweeps a warm-started rl policy is fit to (budget-hw, search-table): both GPU models' main sweeps and the H100's tiny one
# (one line: the stages split it with `read -a`, which stops at the first newline)
WARM_SWEEPS="benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz \
benchmarks/results/nvidia_h100_80gb_hbm3/sweep_tiny_2026-11-25_b1c4805.json.gz benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz"
# ... and, for a searched table, the H200's searched-table stores too (what its search measured below 2^32: on replayed
# H100 timings the fit with them found more, policy_veto_2026-11-27_0fbf0db/README.md)
WARM_STORES=$(printf 'benchmarks/results/nvidia_h200/search_table_2026-11-27_3493618_%s.sqlite.gz ' fp16_nn fp16_nt bf16_nn bf16_nt)
PROTOCOL_IMPLS=${PROTOCOL_IMPLS:-cudal2,torch,cublaslt-autotune-nn,cublaslt-autotune-tn}
# bench-tuned: the same-layout bars and their independent repeats (the noise floor of docs/EVALUATION.md)
TUNED_IMPLS=${TUNED_IMPLS:-cudal2,torch,cublaslt-autotune-nn,cublaslt-autotune-tn,cublaslt-autotune-nn-repeat,cublaslt-autotune-tn-repeat}
GPU_SLUG=$("$PY" -c "import torch; from cudal2_ops.tables import gpu_slug; print(gpu_slug(torch.cuda.get_device_name(0)))" 2>/dev/null || echo unknown_gpu)
# Every kernel build here (the extension's and the candidates') targets this GPU only, as setup.py does, so objects
# prebuilt for it elsewhere (build/kernel_cache, carried) are found by the same keys.
GPU_ARCH=$("$PY" -c "import torch; m, n = torch.cuda.get_device_capability(); print(f'{m}.{n}' + 'a' * (m == 9))" 2>/dev/null)
[ -z "${GPU_ARCH}" ] || export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$GPU_ARCH}

stage() {  # stage NAME COMMAND...: runs COMMAND with its log in OUT_DIR/NAME.log, records status and duration
  local name=$1; shift
  local t0=$SECONDS
  timeout "${STAGE_TIMEOUT:-540}" "$@" >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$SUMMARY"
  tail -n 4 "$OUT_DIR/$name.log" | sed "s/^/  [$name] /" | tee -a "$SUMMARY"
  return $rc
}

# check_kernels NAME KERNELS LIB: kernel configs KERNELS (comma-separated) generated, built alone into LIB, GPU-tested
# and sanitized (OUT_DIR/NAME_sanitize.json)
check_kernels() {
  local name=$1 names=$2 lib=$3
  stage "${name}_build" bash -c "$PY -m cudal2_catalog.codegen --names ${names//,/ } &&
    $PY -m build_tools.kernel_lib --names ${names//,/ } --out $lib" || return 1
  CUDAL2_TEST_KERNEL_LIB=$lib stage "${name}_tests" "$PY" -m pytest -q -m gpu tests/gpu/test_kernels_sm90_tma_ws.py \
    tests/gpu/test_kernels_sm80_cute.py tests/gpu/test_kernels_decode.py tests/gpu/test_kernels_tiny.py --no-header -rfE
  stage "${name}_sanitize" "$PY" scripts/sanitize_kernels.py --lib "$lib" --racecheck-families tiny \
    --out "$OUT_DIR/${name}_sanitize.json"
}

run_stage() {
  case $1 in
    build) stage build ./scripts/install.sh && stage info "$PY" -m cudal2_ops info ;;
    tests) CUDAL2_TEST_KERNEL_LIB=cudal2_ops/libcudal2_kernels.so stage gpu_tests "$PY" -m pytest -q -m gpu tests \
             --no-header -rfE --durations=25 ;;
    latency) stage latency "$PY" -m benchmarks.api_latency --out "$OUT_DIR/api_latency.json" ;;
    sweep) CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} \
             stage sweep "$PY" -m search.sweep --out "$OUT_DIR/sweep.json" --budget-s "${SWEEP_BUDGET_S:-600}" ;;
    sweep-cold) CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} \
             stage sweep_cold "$PY" -m search.sweep --max-m 64 --cold-weights --out "$OUT_DIR/sweep_cold.json" \
             --budget-s "${SWEEP_BUDGET_S:-600}" ;;
    fuzz) stage fuzz "$PY" scripts/fuzz_api.py --cases "${FUZZ_CASES:-10000}" --seed 0 --out "$OUT_DIR/fuzz.json" ;;
    family-check) # after a header edit: the GPU tests and compute-sanitizer (memcheck, racecheck of tiny) of the families
                  # in $CHECK_FAMILIES (comma-separated, default tiny) on the installed library; the report
                  # (OUT_DIR/family_check_sanitize.json) lets the sanitizer gate take their entries again
      local families=${CHECK_FAMILIES:-tiny} family test_files=()
      for family in ${families//,/ }; do test_files+=("tests/gpu/test_kernels_$family.py"); done
      stage family_check_sanitize "$PY" scripts/sanitize_kernels.py --lib cudal2_ops/libcudal2_kernels.so \
        --families "$families" --racecheck-families tiny --jobs "${SANITIZE_JOBS:-4}" \
        --out "$OUT_DIR/family_check_sanitize.json"
      CUDAL2_TEST_KERNEL_LIB=cudal2_ops/libcudal2_kernels.so stage family_check_tests "$PY" -m pytest -q -m gpu \
        "${test_files[@]}" --no-header -rfE ;;
    sanitize) stage sanitize "$PY" scripts/sanitize_kernels.py --lib cudal2_ops/libcudal2_kernels.so \
                ${SANITIZE_SAMPLE:+--sample $SANITIZE_SAMPLE} --families "${SANITIZE_FAMILIES:-}" \
                ${SANITIZE_WITHHELD:+--withheld-in kernels/sm90/$GPU_SLUG.json} \
                --racecheck-families "${SANITIZE_RACECHECK:-tiny}" --jobs "${SANITIZE_JOBS:-4}" \
                --out "$OUT_DIR/sanitize.json" ;;
    bench-kernel) CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} stage bench_kernel "$PY" -m benchmarks.grid --shapes g1000 --layouts nt,nn --dtypes fp16 \
                    --modes kernel --out "$OUT_DIR/g1000_kernel.json" ;;
    bench-after) for pdl in 1 0; do  # G1000 sample100 kernel mode back to back and after a non-GEMM kernel, PDL off, on
                   CUDAL2_DISABLE_PDL=$pdl stage "bench_after_pdl$((1 - pdl))" "$PY" -m benchmarks.grid --shapes g1000 \
                     --sample 100 --seed 0 --layouts nt,nn --dtypes fp16 --modes kernel,kernel_after \
                     --impls "$PROTOCOL_IMPLS" --out "$OUT_DIR/g1000_after_pdl$((1 - pdl)).json"
                 done ;;
    bench-offline) stage bench_offline "$PY" -m benchmarks.grid --shapes g1000 --layouts nt,nn --dtypes fp16 \
                     --modes offline --out "$OUT_DIR/g1000_offline.json" ;;
    bench-server) stage bench_server "$PY" -m benchmarks.grid --shapes g1000 --sample 100 --seed 0 --layouts nt,nn \
                    --dtypes fp16 --modes server --out "$OUT_DIR/g1000_server.json" ;;
    bench-llm) CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} stage bench_llm "$PY" -m benchmarks.grid --shapes llm --layouts nt --dtypes fp16,bf16 \
                 --modes kernel --out "$OUT_DIR/llm_kernel.json" ;;
    protocol) for v in default:1:0 short:0.03:0 nopdl:1:1; do  # name:target_ms:pdl_off, G1000 sample100 kernel mode
                IFS=: read -r name target nopdl <<<"$v"
                CUDAL2_DISABLE_PDL=$nopdl stage "protocol_$name" "$PY" -m benchmarks.grid --shapes g1000 --sample 100 \
                  --seed 0 --layouts nt,nn --dtypes fp16 --modes kernel --impls "$PROTOCOL_IMPLS" --target-ms "$target" \
                  --out "$OUT_DIR/protocol_$name.json"
              done ;;
    small) stage small_offline "$PY" -m benchmarks.grid --shapes g1000 --below-mnk-log2 30 --layouts nt,nn \
             --dtypes fp16 --modes offline --impls "$PROTOCOL_IMPLS" --out "$OUT_DIR/g1000_below30_offline.json"
           stage small_kernel "$PY" -m benchmarks.grid --shapes g1000 --below-mnk-log2 32 --layouts nt,nn \
             --dtypes fp16 --modes kernel --impls "$PROTOCOL_IMPLS" --out "$OUT_DIR/g1000_below32_kernel.json" ;;
    decode-bw) stage decode_bw "$PY" -m benchmarks.decode_bandwidth --out "$OUT_DIR/decode_bandwidth.json" ;;
    e2e) stage e2e "$PY" -m benchmarks.e2e --out "$OUT_DIR" ;;
    e2e-lowering) for v in on off; do
                    CUDAL2_DISABLE_INDUCTOR_LOWERING=$([ $v = off ] && echo 1 || echo 0) TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 \
                      stage e2e_lowering_$v "$PY" -m benchmarks.e2e --out "$OUT_DIR/e2e_lowering_$v" \
                      --modes compile,compile+graph --prefill-batches "" --budget-s "${E2E_BUDGET_S:-120}"
                  done ;;
    candidates) local names=${CANDIDATES:?CANDIDATES names the kernel configs to try}
                check_kernels candidates "$names" build/candidates.so
                CUDAL2_KERNEL_LIBS=build/candidates.so CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} stage candidates_sweep "$PY" -m search.sweep \
                  ${CANDIDATES_SWEEP_ARGS:---cold-weights --sample 0 --max-log2-mnk 0 --min-m ${CANDIDATES_MIN_M:-1} --max-m ${CANDIDATES_MAX_M:-64}} \
                  --out "$OUT_DIR/sweep_candidates.json" --budget-s "${SWEEP_BUDGET_S:-600}" &&
                stage candidates_report "$PY" -m studies.candidate_report "$OUT_DIR/sweep_candidates.json" \
                  --candidates "$names" --out "$OUT_DIR/candidates_report.md" ;;
    new-kernels) local names=${NEW_KERNELS:-$("$PY" scripts/tune_grid.py --missing-kernels --sweeps ${TUNE_SWEEPS:?} | paste -sd,)}
                 if [ -z "$names" ]; then echo "new-kernels: none" | tee -a "$SUMMARY"
                 else echo "new-kernels: $names" >>"$SUMMARY"; check_kernels new_kernels "$names" build/new_kernels.so; fi ;;
    search-table) # one dtype and layout of a searched table: the rl policy warm-started (SEARCH_WARM_START) on
                  # SEARCH_SHAPES (g1000+llm) below SEARCH_MAX_LOG2_MNK (32), smallest first (SEARCH_WINS_FIRST_FROM:
                  # the wins of those stores first, search/problem_order.py), for SEARCH_MINUTES (6) of
                  # the run's own time, SEARCH_MAX_BUILDS (16) new builds, SEARCH_PER_ROUND (4) proposals per problem
                  # and round (a round visits every problem before the next: fewer reach more problems in a short
                  # run), SEARCH_WAVE (32) problems proposed at a time (each wave after the verdicts of the waves
                  # before); its store search_<dtype>_<layout>.sqlite in KEEP_DIR and OUT_DIR; a store already in
                  # KEEP_DIR is resumed for SEARCH_MINUTES more
      local case=${SEARCH_DTYPE:-fp16}_${SEARCH_LAYOUT:-nt} dir=${KEEP_DIR:-$OUT_DIR} minutes=${SEARCH_MINUTES:-6}
      local store; mkdir -p "$dir"; store="$dir/search_$case.sqlite"
      read -r -a warm <<<"${SEARCH_WARM_START:-$WARM_SWEEPS $WARM_STORES}"
      local cmd budget=$minutes run_id order=()
      [ -z "${SEARCH_WINS_FIRST_FROM:-}" ] || read -r -a order <<<"--wins-first-from $SEARCH_WINS_FIRST_FROM"
      if [ -f "$store" ]; then  # the latest run, finished or not, given SEARCH_MINUTES beyond what it has used
        read -r run_id budget < <("$PY" -c "import sys; from search.store import Store
run = Store(sys.argv[1], readonly=True).runs()[-1]; print(run['id'], round(run['elapsed_s'] / 60 + float(sys.argv[2]), 2))" \
          "$store" "$minutes") || return 1
        cmd=(resume --store "$store" --run "$run_id" --backend local --artifacts build/search)
      else cmd=(run --arch sm90 --dtype "${SEARCH_DTYPE:-fp16}" --layout "${SEARCH_LAYOUT:-nt}"
        --shapes "${SEARCH_SHAPES:-g1000+llm}" --max-log2-mnk "${SEARCH_MAX_LOG2_MNK:-32}" --policy rl
        --backend local --artifacts build/search --store "$store" --seed "${SEARCH_SEED:-0}" --warm-start "${warm[@]}"
        --per-round "${SEARCH_PER_ROUND:-4}"); fi
      STAGE_TIMEOUT=$("$PY" -c "print(int(${minutes} * 60 + 150))") stage "search_table_$case" "$PY" -m search \
        "${cmd[@]}" ${order[@]+"${order[@]}"} --budget-minutes "$budget" --max-builds "${SEARCH_MAX_BUILDS:-16}" \
        --wave "${SEARCH_WAVE:-32}" --quiet
      [ "$dir" = "$OUT_DIR" ] || cp "$store" "$OUT_DIR/" ;;
    search) # rl warm-started vs random at SEARCH_PER_PROBLEM (16) evaluations per problem of SEARCH_SHAPES, the whole
            # stage within SEARCH_MINUTES (half each, judge start-up and the report on top: about 1.5 min more)
            local store="$OUT_DIR/search.sqlite" minutes=${SEARCH_MINUTES:-4} per=${SEARCH_PER_PROBLEM:-16}
            local count; count=$("$PY" -c "import sys; from search.cli_args import load_shapes
print(len(load_shapes(sys.argv[1], int(sys.argv[2]))))" "${SEARCH_SHAPES:-sample20}" "${SEARCH_SEED:-0}") || return 1
            local half; half=$("$PY" -c "print(round(${minutes} / 2, 2))")
            local common=(--arch sm90 --dtype "${SEARCH_DTYPE:-fp16}" --layout "${SEARCH_LAYOUT:-nt}"
              --shapes "${SEARCH_SHAPES:-sample20}" --budget-evals "${SEARCH_EVALS:-$((per * count))}"
              --budget-minutes "$half" --backend local --artifacts build/search --store "$store"
              --max-builds "${SEARCH_MAX_BUILDS:-0}" --seed "${SEARCH_SEED:-0}")
            # SEARCH_WARM_START: measurement files the rl policy is fit to first (default: one sweep per GPU, the H100's
            # and the H200's, about 15 s of fitting; every committed sweep would take about 100 s)
            read -r -a warm <<<"${SEARCH_WARM_START:-benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz}"
            for policy in ${SEARCH_POLICIES:-rl random}; do
              extra=(); [ "$policy" = rl ] && [ ${#warm[@]} -gt 0 ] && extra=(--warm-start "${warm[@]}")
              STAGE_TIMEOUT=$("$PY" -c "print(int(${half} * 60 + 120))") \
                stage "search_$policy" "$PY" -m search run "${common[@]}" --policy "$policy" "${extra[@]}"
            done
            stage search_report "$PY" -m search report --store "$store" --out "$OUT_DIR/search_report" &&
              sed -n '/^## Throughput/,/^## Policies/p' "$OUT_DIR/search_report/report.md" | grep '^|' |
              tee -a "$SUMMARY" ;;
    budget-hw) # studies.budget_hardware on every visible GPU (CUDA_VISIBLE_DEVICES), its stores kept in KEEP_DIR so
               # that the next call goes on; no round starts after BUDGET_HW_MINUTES (7); BUDGET_HW_ARGS adds options
               local stores=${KEEP_DIR:-$OUT_DIR}/budget_hw minutes=${BUDGET_HW_MINUTES:-7}
               read -r -a more <<<"${BUDGET_HW_ARGS:-}"
               read -r -a warm <<<"$WARM_SWEEPS"
               STAGE_TIMEOUT=${BUDGET_HW_TIMEOUT:-$((minutes * 60 + 180))} stage budget_hw "$PY" -m studies.budget_hardware \
                 --artifacts build/search --store-dir "$stores" --minutes "$minutes" --out "$OUT_DIR/budget_hardware.json" \
                 --warm-from "${warm[@]}" "${more[@]}"
               mkdir -p "$OUT_DIR/budget_hw" && cp "$stores"/*.sqlite "$OUT_DIR/budget_hw/" 2>/dev/null ;;
    search-emit) stage search_emit "$PY" -m search emit --store "$OUT_DIR/search.sqlite" &&
                 cp kernels/sm90/"$GPU_SLUG".json "$OUT_DIR/" && stage rebuild ./scripts/install.sh ;;
    e2e-trace) stage e2e_trace "$PY" -m benchmarks.e2e_trace --out "$OUT_DIR" ;;
    table) stage table "$PY" -m search.table_select "$OUT_DIR/sweep.json" \
             $([ -f "$OUT_DIR/sweep_cold.json" ] && echo "$OUT_DIR/sweep_cold.json") \
             && cp kernels/sm90/"$GPU_SLUG".json "$OUT_DIR/" && stage rebuild ./scripts/install.sh ;;
    reference) stage reference "$PY" -m benchmarks.reference_shapes --dtypes "${REFERENCE_DTYPES:-fp16,bf16}" \
                 --out "$OUT_DIR/reference_shapes.json" ;;
    reference-nopdl) CUDAL2_DISABLE_PDL=1 stage reference_nopdl "$PY" -m benchmarks.reference_shapes \
                       --out "$OUT_DIR/reference_shapes_nopdl.json" ;;
    tune-grid) CUDAL2_DISABLE_PDL=1 stage tune_grid "$PY" scripts/tune_grid.py --shapes "${TUNE_SHAPES:-g1000,llm}" \
                 --layouts "${TUNE_LAYOUTS:-nn,nt}" --dtypes "${TUNE_DTYPES:-fp16,bf16}" --base "${TUNE_BASE:-kernels/sm90/$GPU_SLUG.json}" \
                 --out "$OUT_DIR/$GPU_SLUG.json" --results "$OUT_DIR/tune_grid.json" ${TUNE_SWEEPS:+--sweeps $TUNE_SWEEPS} \
                 ${TUNE_MIN_LOG2_MNK:+--min-log2-mnk $TUNE_MIN_LOG2_MNK} ${TUNE_MAX_LOG2_MNK:+--max-log2-mnk $TUNE_MAX_LOG2_MNK} \
                 ${TUNE_GRID_UP_TO:+--grid-up-to $TUNE_GRID_UP_TO} ${TUNE_KNOBS_FROM:+--knobs-from $TUNE_KNOBS_FROM} \
                 ${TUNE_BUDGET_S:+--budget-s $TUNE_BUDGET_S} \
                 ${TUNE_MISSING_ONLY:+--missing-only} ${TUNE_SWEEP_PROBLEMS_ONLY:+--sweep-problems-only} \
                 ${TUNE_PROBLEMS_FROM:+--problems-from $TUNE_PROBLEMS_FROM} ;;
    offgrid) CUDAL2_DISABLE_PDL=1 stage offgrid "$PY" scripts/check_offgrid_rule.py --table "$OUT_DIR/$GPU_SLUG.json" \
               --out "$OUT_DIR/offgrid_rule.json" --apply ;;
    route) stage route "$PY" -m benchmarks.lt_route_overhead --out "$OUT_DIR/lt_route_overhead.json" ;;
    gate) stage gate "$PY" -m search.sanitize_gate "$OUT_DIR/$GPU_SLUG.json" \
            --reports $(ls "$OUT_DIR"/*sanitize*.json 2>/dev/null) ;;
    profile) CUDAL2_DISABLE_PDL=1 stage profile "$PY" -m benchmarks.profile_small --out "$OUT_DIR/profile_small.json" ;;
    consistency) CUDAL2_DISABLE_PDL=1 stage consistency "$PY" -m benchmarks.lt_candidate_consistency \
                   --out "$OUT_DIR/lt_candidate_consistency.json" ;;
    bench-tuned) local layouts=${TUNED_LAYOUTS:-nt,nn} tag=${TUNED_LAYOUTS:+_${TUNED_LAYOUTS//,/_}} dtypes=${TUNED_DTYPES:-fp16 bf16}
                 for dtype in $dtypes; do  # the tuned table of OUT_DIR (or $TUNED_TABLE), as a user's process runs it
                   CUDAL2_TABLE="${TUNED_TABLE:-$OUT_DIR/$GPU_SLUG.json}" CUDAL2_DISABLE_PDL=1 stage "bench_tuned_g1000_$dtype$tag" \
                     "$PY" -m benchmarks.grid --shapes g1000 --layouts "$layouts" --dtypes "$dtype" --modes kernel \
                     --impls "$TUNED_IMPLS" ${TUNED_BELOW:+--below-mnk-log2 $TUNED_BELOW} ${TUNED_PROBLEMS_FROM:+--problems-from $TUNED_PROBLEMS_FROM} \
                     --out "$OUT_DIR/g1000_kernel_$dtype$tag.json" --resume
                 done
                 CUDAL2_TABLE="${TUNED_TABLE:-$OUT_DIR/$GPU_SLUG.json}" CUDAL2_DISABLE_PDL=1 stage "bench_tuned_llm$tag" "$PY" -m benchmarks.grid \
                   --shapes llm --layouts "$layouts" --dtypes "${dtypes// /,}" --modes kernel \
                   --impls "$TUNED_IMPLS" ${TUNED_BELOW:+--below-mnk-log2 $TUNED_BELOW} ${TUNED_PROBLEMS_FROM:+--problems-from $TUNED_PROBLEMS_FROM} \
                   --out "$OUT_DIR/llm_kernel$tag.json" --resume ;;
    tune-merge) # the tables of several tune-grid lanes (each tuned from the same base) as one: $TUNE_PARTS, their
                # results files in order, over $TUNE_BASE (default the committed table), into OUT_DIR/<gpu_slug>.json
                stage tune_merge "$PY" scripts/tune_grid.py --merge ${TUNE_PARTS:?TUNE_PARTS names tune_grid results files} \
                  --base "${TUNE_BASE:-kernels/sm90/$GPU_SLUG.json}" --out "$OUT_DIR/$GPU_SLUG.json" \
                  --results "$OUT_DIR/tune_grid_merged.json" ;;
    tiny) CUDAL2_TEST_KERNEL_LIB=cudal2_ops/libcudal2_kernels.so stage tiny_tests "$PY" -m pytest -q -m gpu \
            tests/gpu/test_kernels_tiny.py --no-header -rfE
          CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} stage sweep_tiny "$PY" -m search.sweep --max-log2-mnk 26 --sample 0 \
            --llm-max-m 0 --out "$OUT_DIR/sweep_tiny.json" --budget-s "${SWEEP_BUDGET_S:-120}" ;;
    floors) CUDAL2_DISABLE_PDL=${CUDAL2_DISABLE_PDL:-1} stage floors "$PY" -m benchmarks.latency_floor \
              --out "$OUT_DIR/latency_floor.json" --budget-s "${FLOORS_BUDGET_S:-360}" ;;
    judge-bench) stage judge_bench "$PY" -m search.judge_bench --json "$OUT_DIR/judge_bench.json" \
                   --profile "$OUT_DIR/judge_profile.txt"
                 stage judge_tests "$PY" -m pytest -q -m gpu tests/gpu/test_search_judge_recheck_gpu.py \
                   tests/gpu/test_search_judge_reuse_gpu.py \
                   tests/gpu/test_search_cheats_gpu.py tests/gpu/test_search_evaluator_gpu.py \
                   tests/gpu/test_search_throughput_gpu.py --no-header -rfE ;;
    *) echo "unknown stage $1" >&2; return 2 ;;
  esac
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT_DIR/gpu.csv" 2>&1
echo "gpu: $(tail -n 1 "$OUT_DIR/gpu.csv") slug=$GPU_SLUG commit=${CUDAL2_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" | tee -a "$SUMMARY"
# A lent machine empties OUT between calls but keeps its disk while warm: with KEEP_DIR, results files (the tuned
# table, sanitizer reports, partial benchmark runs) are brought back from there first and saved there after each stage.
keep() { [ -z "${KEEP_DIR:-}" ] || { mkdir -p "$KEEP_DIR" && cp "$OUT_DIR"/*.json "$KEEP_DIR"/ 2>/dev/null; } || true; }
[ -z "${KEEP_DIR:-}" ] || [ ! -d "$KEEP_DIR" ] || cp -n "$KEEP_DIR"/*.json "$OUT_DIR"/ 2>/dev/null
# The exit status says whether every stage passed (a caller that builds stops on a failed build); every stage runs.
failed=0
for s in "$@"; do run_stage "$s" || failed=1; keep; done
exit $failed
