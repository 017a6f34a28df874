"""scripts/gpu_lanes.sh: gpu_check stages in parallel lanes of one multi-GPU host (CPU: a stand-in stage runner)."""
from __future__ import annotations

import gzip
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

from search.candidate import Problem
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store

REPO = Path(__file__).resolve().parent.parent

STAND_IN = """#!/usr/bin/env bash
out=$1; shift
mkdir -p "$out"
echo "gpus=$CUDA_VISIBLE_DEVICES keep=${KEEP_DIR:-} dtypes=${TUNED_DTYPES:-} stages=$*" >> "$out/summary.txt"
"""


def lanes(tmp_path: Path, *specs: str) -> subprocess.CompletedProcess:
    runner = tmp_path / "gpu_check_stand_in.sh"
    runner.write_text(STAND_IN)
    runner.chmod(0o755)
    env = {**os.environ, "GPU_CHECK": str(runner), "KEEP_DIR": str(tmp_path / "keep")}
    env.pop("TUNED_DTYPES", None)
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_lanes.sh"), str(tmp_path / "out"), *specs],
                          capture_output=True, text=True, env=env, timeout=60)


def test_each_lane_runs_its_stages_on_its_gpus_with_its_settings(tmp_path):
    done = lanes(tmp_path, "0,1,2:budget-hw", "3:TUNED_DTYPES=fp16 judge-bench bench-tuned")
    assert done.returncode == 0, done.stderr
    lane0 = (tmp_path / "out" / "lane0" / "summary.txt").read_text()
    lane1 = (tmp_path / "out" / "lane1" / "summary.txt").read_text()
    assert f"gpus=0,1,2 keep={tmp_path / 'keep' / 'lane0'} dtypes= stages=budget-hw" in lane0
    assert f"gpus=3 keep={tmp_path / 'keep' / 'lane1'} dtypes=fp16 stages=judge-bench bench-tuned" in lane1
    assert "== lane 1 (3:TUNED_DTYPES=fp16 judge-bench bench-tuned)" in done.stdout


def test_a_lane_without_gpus_or_stages_is_refused(tmp_path):
    for spec in ("budget-hw", ":budget-hw", "0:"):
        done = lanes(tmp_path, spec)
        assert done.returncode == 2 and "expected GPUS:STAGE" in done.stderr, (spec, done.stderr)


SEARCH_STAND_IN = """#!/usr/bin/env bash
out=$1; shift
mkdir -p "$out"
echo "gpus=$CUDA_VISIBLE_DEVICES case=${SEARCH_DTYPE:-}_${SEARCH_LAYOUT:-} minutes=${SEARCH_MINUTES:-}" \\
  "keep=${KEEP_DIR:-} stages=$*" >> "$out/summary.txt"
"""


def search_table(tmp_path: Path, step: str, stand_in: str = SEARCH_STAND_IN, **settings: str):
    """scripts/search_table.sh STEP with a stand-in stage runner, KEEP (already built) under `tmp_path` and the
    environment `settings` (OUT, KEEP_DIR, SEARCH_MINUTES and CUDA_VISIBLE_DEVICES unset unless given); (the finished
    process, KEEP)."""
    runner = tmp_path / "gpu_check_stand_in.sh"
    runner.write_text(stand_in)
    runner.chmod(0o755)
    keep = tmp_path / "keep"
    keep.mkdir(exist_ok=True)
    (keep / "built").touch()
    env = {**os.environ, "GPU_CHECK": str(runner), "KEEP": str(keep), "GPU_SLUG": "test_gpu", **settings}
    for name in ("OUT", "KEEP_DIR", "SEARCH_MINUTES", "CUDA_VISIBLE_DEVICES"):
        if name not in settings:
            env.pop(name, None)
    done = subprocess.run(["bash", str(REPO / "scripts" / "search_table.sh"), step], capture_output=True, text=True,
                          env=env, timeout=60)
    return done, keep


def summaries(folder: Path) -> dict[str, str]:
    """Every lane summary under `folder` (a step's output folder in KEEP), by its path there."""
    return {path.relative_to(folder).as_posix(): path.read_text().strip()
            for path in sorted(folder.glob("*/lane*/summary.txt"))}


def test_search_table_gives_each_case_a_gpu_and_takes_turns_when_there_are_fewer(tmp_path):
    """scripts/search_table.sh search: one lane per dtype x layout; with 2 GPUs two turns of two lanes, each lane's
    search given half of what the call leaves, its store kept under KEEP/search/<case>."""
    done, keep = search_table(tmp_path, "search", GPUS="2", CALL_S="570")
    assert done.returncode == 0, done.stderr
    lane = "gpus={0} case={1} minutes=3.5 keep=" + str(keep / "search") + "/{1} stages=search-table"
    assert summaries(keep / "s") == {
        "fp16_nn+fp16_nt/lane0/summary.txt": lane.format(0, "fp16_nn"),
        "fp16_nn+fp16_nt/lane1/summary.txt": lane.format(1, "fp16_nt"),
        "bf16_nn+bf16_nt/lane0/summary.txt": lane.format(0, "bf16_nn"),
        "bf16_nn+bf16_nt/lane1/summary.txt": lane.format(1, "bf16_nt")}


def test_table_cases_give_a_call_to_some_cases_and_keep_each_case_in_its_place(tmp_path):
    """TABLE_CASES: a one-GPU call searches only the cases named, with the whole call's time; a case keeps its store
    folder and its output folder whichever call runs it, so calls for other cases leave its results alone; an unknown
    case is refused."""
    for cases in ("bf16_nt", "fp16_nn bf16_nt"):  # 7.5 minutes for the one case, then 3.5 each for two
        done, keep = search_table(tmp_path, "search", GPUS="1", CALL_S="570", TABLE_CASES=cases)
        assert done.returncode == 0, done.stderr
    search = keep / "search"
    lane = "gpus=0 case={0} minutes={1} keep=" + str(search) + "/{0} stages=search-table"
    assert summaries(keep / "s") == {
        "bf16_nt/lane0/summary.txt": lane.format("bf16_nt", 7.5) + "\n" + lane.format("bf16_nt", 3.5),
        "fp16_nn/lane0/summary.txt": lane.format("fp16_nn", 3.5)}
    done, _ = search_table(tmp_path, "search", GPUS="1", TABLE_CASES="fp32_nn")
    assert done.returncode == 2 and "TABLE_CASES: unknown case fp32_nn" in done.stderr


def test_table_gpu_stops_a_step_on_another_gpu_model_before_the_build(tmp_path):
    """TABLE_GPU: a step meant for one GPU model stops with status 3 on a machine of another (nvidia-smi says which),
    before any stage runs; on the model named it goes on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\necho 'NVIDIA H200'\n")
    smi.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    done, keep = search_table(tmp_path, "search", GPUS="1", TABLE_CASES="fp16_nt", TABLE_GPU="H100", PATH=path)
    assert done.returncode == 3 and "this machine's GPU is NVIDIA H200" in done.stderr, done.stderr
    assert not (keep / "s").exists() and not (keep / "search").exists()
    done, keep = search_table(tmp_path, "search", GPUS="1", TABLE_CASES="fp16_nt", TABLE_GPU="H200", PATH=path)
    assert done.returncode == 0, done.stderr
    assert (keep / "s" / "fp16_nt" / "lane0" / "summary.txt").exists()

def committed_store(path: Path, evaluations: int) -> bytes:
    """A gzipped search store at `path` of a simulated run of `evaluations` evaluations; its SQLite bytes."""
    plain = path.with_suffix("")
    store = Store(plain)
    Search.start(store, SimulatedBackend(), RunArgs(budget_evals=evaluations),
                 [Problem("nt", "bf16", 128, 128, 128), Problem("nt", "bf16", 64, 4096, 4096)]).run()
    assert len(store.evaluations()) == evaluations
    store.close()
    data = plain.read_bytes()
    plain.unlink()
    path.write_bytes(gzip.compress(data))
    return data


def test_search_table_resumes_the_committed_stores(tmp_path):
    """SEARCH_RESUME_FROM: of each case's committed stores (gzip), the latest snapshot of its run, the one with the
    most evaluations (names of one day sort by commit, not by time), is unpacked where its lane looks for it."""
    committed = tmp_path / "results"
    committed.mkdir()
    newest = committed_store(committed / "search_table_2026-11-27_0aa_bf16_nt.sqlite.gz", 30)
    for stamp, evaluations in (("2026-11-26_fff", 10), ("2026-11-27_fff", 20)):
        committed_store(committed / f"search_table_{stamp}_bf16_nt.sqlite.gz", evaluations)
    done, keep = search_table(tmp_path, "search", GPUS="4", SEARCH_RESUME_FROM=str(committed), SEARCH_MINUTES="1")
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(keep).as_posix() for p in (keep / "search").rglob("*.sqlite")) == [
        "search/bf16_nt/search_bf16_nt.sqlite"]
    assert (keep / "search" / "bf16_nt" / "search_bf16_nt.sqlite").read_bytes() == newest


def test_search_table_check_runs_a_header_edits_families_on_the_last_gpu_beside_the_finds(tmp_path):
    """CHECK_FAMILIES: the family check (GPU tests, sanitizer report for the gate) on the last GPU while the first
    checks the finds; the tuning lanes start after both."""
    stand_in = SEARCH_STAND_IN + ('echo "start $* $(date +%s.%N)" >> "$KEEP/order.txt"\n'
                                  '[ "$*" != family-check ] || sleep 1  # the slower of the two checks\n'
                                  'echo "end $* $(date +%s.%N)" >> "$KEEP/order.txt"\n')
    done, keep = search_table(tmp_path, "check", stand_in, GPUS="4", CHECK_FAMILIES="tiny")
    assert done.returncode == 0, done.stderr
    assert "gpus=3 " in (keep / "families" / "summary.txt").read_text()
    assert "stages=family-check" in (keep / "families" / "summary.txt").read_text()
    assert "gpus=0 " in (keep / "finds" / "summary.txt").read_text()
    events = [line.split() for line in (keep / "order.txt").read_text().splitlines()]
    checks_end = [float(t) for event, stage, t in events if event == "end" and stage in ("family-check", "new-kernels")]
    tunes_start = [float(t) for event, stage, t in events if event == "start" and stage == "tune-grid"]
    assert len(checks_end) == 2 and len(tunes_start) == 4 and max(checks_end) <= min(tunes_start)


def test_the_warm_start_sweeps_split_into_every_listed_file_and_each_is_committed():
    """gpu_check.sh's WARM_SWEEPS, split as its stages split it (`read -r -a`), names every sweep it lists (a newline
    inside the value once cut the list to its first file) and each of them exists; the search-table stage's list adds
    WARM_STORES, four committed stores."""
    script = (REPO / "scripts" / "gpu_check.sh").read_text()
    assignment = script[script.index("\nWARM_SWEEPS=") + 1:]
    assignment = assignment[:assignment.index('"\n', assignment.index('="') + 2) + 1]
    listed = assignment.replace("\\\n", " ").split('"')[1].split()
    split = subprocess.run(["bash", "-c", assignment + '\nread -r -a warm <<<"$WARM_SWEEPS"; printf "%s\\n" "${warm[@]}"'],
                           capture_output=True, text=True, cwd=REPO, timeout=30).stdout.split()
    assert len(listed) >= 3 and split == listed
    assert all((REPO / path).is_file() for path in split)
    stores_line = script[script.index("\nWARM_STORES=") + 1:]
    stores_line = stores_line[:stores_line.index("\n") + 1]
    table_split = subprocess.run(
        ["bash", "-c", assignment + "\n" + stores_line + 'read -r -a warm <<<"$WARM_SWEEPS $WARM_STORES"; printf "%s\\n" "${warm[@]}"'],
        capture_output=True, text=True, cwd=REPO, timeout=30).stdout.split()
    stores = table_split[len(listed):]
    assert table_split[:len(listed)] == listed and len(stores) == 4 and all(s.endswith(".sqlite.gz") for s in stores)
    assert all((REPO / path).is_file() for path in stores)


def test_each_steps_archive_holds_what_that_step_wrote(tmp_path):
    """$OUT/keep_<step>.tgz: the files the step wrote or changed in KEEP (the lent machine's way back stays small as
    KEEP grows), not the earlier steps' (nor the build marker or the libraries)."""
    out = tmp_path / "out"
    out.mkdir()
    writes_a_library = SEARCH_STAND_IN + 'touch "$out/kernels.so"\n'
    for step in ("search", "check"):
        done, keep = search_table(tmp_path, step, writes_a_library, GPUS="4", OUT=str(out), SEARCH_MINUTES="1")
        assert done.returncode == 0, done.stderr
    assert (keep / "finds" / "kernels.so").is_file()
    names = {}
    for step in ("search", "check"):
        with tarfile.open(out / f"keep_{step}.tgz") as archive:
            names[step] = {name.removeprefix("./") for name in archive.getnames()}
    turn = "fp16_nn+fp16_nt+bf16_nn+bf16_nt"
    assert f"s/{turn}/lane3/summary.txt" in names["search"] and not any(n.startswith("s/") for n in names["check"])
    assert "finds/summary.txt" in names["check"] and f"tune/{turn}/lane3/summary.txt" in names["check"]
    assert not any(n == "built" or n.startswith(".began") or n.endswith(".so") for n in names["search"] | names["check"])


def test_a_stopped_step_still_packs_what_it_wrote(tmp_path):
    """A step stopped by SIGTERM to its process group (a call's time limit) exits 143 and still leaves
    $OUT/keep_<step>.tgz with what it wrote so far: a cut search's stores come back."""
    out = tmp_path / "out"
    out.mkdir()
    stand_in = SEARCH_STAND_IN + ('[ "$*" = search-table ] || exit 0  # the lanes\' build check\n'
                                  'mkdir -p "$KEEP_DIR"\n'
                                  'echo rows > "$KEEP_DIR/search_${SEARCH_DTYPE}_${SEARCH_LAYOUT}.sqlite"\nsleep 60\n')
    runner = tmp_path / "gpu_check_stand_in.sh"
    runner.write_text(stand_in)
    runner.chmod(0o755)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "built").touch()
    env = {**os.environ, "GPU_CHECK": str(runner), "KEEP": str(keep), "GPU_SLUG": "test_gpu", "GPUS": "1",
           "OUT": str(out), "SEARCH_MINUTES": "1"}
    step = subprocess.Popen(["bash", str(REPO / "scripts" / "search_table.sh"), "search"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    store = keep / "search" / "fp16_nn" / "search_fp16_nn.sqlite"
    deadline = time.monotonic() + 30
    while not store.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(step.pid, signal.SIGTERM)
    _, stderr = step.communicate(timeout=30)
    assert step.returncode == 143, stderr
    assert "step search stopped" in stderr
    with tarfile.open(out / "keep_search.tgz") as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
    assert "search/fp16_nn/search_fp16_nn.sqlite" in names and "s/fp16_nn/lane0/summary.txt" in names
    assert not any(name.startswith("s/fp16_nt") for name in names)  # the later turns never started


def test_gpu_check_exits_nonzero_when_a_stage_fails_and_runs_the_rest(tmp_path):
    """A failed stage (here one it does not know) fails the run, with or without KEEP_DIR, and later stages still run:
    a caller that builds first (gpu_lanes.sh, search_table.sh) must not go on as if the build had passed."""
    for keep in ("", str(tmp_path / "keep")):
        env = {**os.environ, "KEEP_DIR": keep}
        done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "out"), "no-such-stage",
                               "another-unknown"], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "unknown stage no-such-stage" in done.stderr and "unknown stage another-unknown" in done.stderr
