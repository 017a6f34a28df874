"""`python -m cudal2_ops.tune`: measure the best choice for each of a list of problems on this GPU, a table kernel or a
cuBLASLt configuration, and write them as a table the dispatcher loads (by default the user's tuned table, which
overlays the shipped one).

    python -m cudal2_ops.tune --problems problems.json            # from cudal2_ops.record_problems(...)
    python -m cudal2_ops.tune --problems p.json --kernels none --out my_table.json

Per problem (random inputs): every candidate cuBLASLt's heuristic offers (up to 100) and the candidate kernels are
timed by CUDA-graph replay with programmatic dependent launch off, the fastest few re-timed; the fastest cuBLASLt
configuration that passes an fp32-reference check is recorded, and a kernel is chosen instead only where it beats that
configuration by the margin and passes the same check, or where the kernel the base table already names for the
problem still beats it by HOLD_MARGIN (a won entry is not given back on a re-tune's noise); where none does, the
fastest kernel timed is recorded beside the configuration as `fastest_kernel`, which the dispatcher ignores. Everything runs through the dispatcher's own
cuBLASLt handle and workspace, so the table replays what was timed.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from cudal2_catalog.config import DEFAULT_KNOBS, Knobs
from cudal2_ops import graph_timing
from cudal2_ops.tables import Problem

PROBLEMS_FORMAT = "cudal2-problems-1"
DEFAULT_MARGIN = 0.03   # a kernel must beat the best cuBLASLt configuration by 3% (the tables' margin)
HOLD_MARGIN = 0.01      # the base table's own kernel keeps its entry while it beats that configuration by 1%
RETIME_TOP = 5          # the fastest configurations timed again, longer, before one is chosen
RETIME_ROUNDS = 3       # interleaved rounds of that re-timing (each candidate's median over the rounds)
NEAR_TIE = 0.05         # re-timed configurations this close to the chosen one are recorded beside it (`cublaslt_near`)
REL_TOL = {"fp16": 1e-3, "bf16": 8e-3}
KERNEL_MODES = ("table", "knobs", "all", "grid", "none")  # which kernels are timed beside cuBLASLt (kernel_candidates)


def read_problems(path: Path) -> list[Problem]:
    """The problems of a file written by `write_problems` (or `record_problems`)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable problems file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PROBLEMS_FORMAT:
        raise ValueError(f"{path}: not a problems file (expected format {PROBLEMS_FORMAT!r})")
    problems = []
    for i, row in enumerate(data.get("problems", [])):
        if (not isinstance(row, list) or len(row) != 5 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                    for v in row[2:])):
            raise ValueError(f"{path}: problem {i} must be [layout, dtype, M, N, K] with integer sizes, got {row!r}")
        problems.append(Problem(*row))
    return problems


def write_problems(path: Path, problems: Iterable[Problem]) -> list[Problem]:
    """Writes `problems` merged with those already in `path` (sorted, no duplicates); returns the merged list."""
    path = Path(path)
    merged = set(problems) | (set(read_problems(path)) if path.exists() else set())
    rows = sorted(merged)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": PROBLEMS_FORMAT, "problems": [[p.layout, p.dtype, p.m, p.n, p.k]
                                                                       for p in rows]}, indent=0))
    tmp.replace(path)
    return rows


def eager_call_us(fn: Callable[[], object]) -> float:
    """One eager call of `fn` after a warm-up call, timed with CUDA events (us): what sizes a replay."""
    import torch

    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3


def graph_time_us(fn: Callable[[], object], target_us: float = 150.0, replays: int = 5) -> float:
    """Median GPU time per call of `fn` (us) by CUDA-graph replay (cudal2_ops.graph_timing), with as many calls per
    replay (at most 100) as take about `target_us` (re-sized from the graph's own time where the eager estimate was
    too high)."""
    import torch

    calls = max(1, min(100, int(target_us / max(eager_call_us(fn), 1.0))))
    return statistics.median(graph_timing.sized_replay_us(lambda i: fn(), 1, calls, replays, torch.cuda.Stream(),
                                                          target_us, 100)[0])


@dataclass
class Timed:
    """One timed candidate: what it is (a cuBLASLt configuration or a kernel with knobs) and its time (us)."""

    us: float
    config: list[int] | None = None
    kernel: str | None = None
    knobs: Knobs = DEFAULT_KNOBS


def fastest(candidates: list[Timed], run: Callable[[Timed], object], retime: int = RETIME_TOP,
            always: Timed | None = None) -> list[Timed]:
    """`candidates` (each timed once already), fastest first, after the finalists were timed again for longer: the
    fastest `retime` plus `always` (the heuristic's choice, which a noisy first pass must not drop), in RETIME_ROUNDS
    interleaved rounds (each round starts one finalist later, so drift is spread over all), each finalist's time the
    median of its rounds."""
    ranked = sorted(candidates, key=lambda c: c.us)
    finalists = ranked[:retime] + ([always] if always is not None and all(always is not c for c in ranked[:retime])
                                   else [])
    rounds: list[list[float]] = [[] for _ in finalists]
    for r in range(RETIME_ROUNDS):
        for i in [(r + j) % len(finalists) for j in range(len(finalists))]:
            rounds[i].append(graph_time_us(lambda c=finalists[i]: run(c), target_us=400.0, replays=3))
    for c, times in zip(finalists, rounds):
        c.us = statistics.median(times)
    rest = [c for c in ranked if all(c is not f for f in finalists)]
    return sorted(finalists, key=lambda c: c.us) + rest


def time_configs(configs: list[list[int]], run_config: Callable[[list[int]], object]) -> list[Timed]:
    """Each configuration timed once (those that fail to run are left out)."""
    timed = []
    for config in configs:
        try:
            timed.append(Timed(graph_time_us(lambda config=config: run_config(config)), config=config))
        except RuntimeError:
            continue
    return timed


@dataclass
class ProblemRun:
    """Random inputs of one problem, the fp32 reference (computed on first use) and the candidates' runners."""

    problem: Problem
    a: object
    b: object
    out: object
    _ref: object = None

    @classmethod
    def make(cls, problem: Problem, seed: int = 0) -> "ProblemRun":
        import torch

        dtype = torch.float16 if problem.dtype == "fp16" else torch.bfloat16
        gen = torch.Generator(device="cuda").manual_seed(seed)
        m, n, k = problem.m, problem.n, problem.k
        a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
        b = torch.randn(*((n, k) if problem.layout == "nt" else (k, n)), device="cuda", dtype=dtype, generator=gen)
        return cls(problem, a, b, torch.empty(m, n, device="cuda", dtype=dtype))

    def correct(self, run: Callable[[], object]) -> bool:
        """Whether `run` writes an output within the dtype's tolerance of the fp32 reference (NaN-poisoned first)."""
        import torch

        if self._ref is None:
            b = self.b.float().t() if self.problem.layout == "nt" else self.b.float()
            self._ref = self.a.float() @ b
        self.out.fill_(float("nan"))
        run()
        err = ((self.out.float() - self._ref).norm() / self._ref.norm().clamp_min(1e-30)).item()
        return math.isfinite(err) and err <= REL_TOL[self.problem.dtype]

    def run_config(self, config: list[int]) -> None:
        from cudal2_ops._extension import _C

        _C.tuning.run_lt_config(self.a, self.b, None, self.out, self.problem.layout, config)

    def run_kernel(self, name: str, knobs: Knobs) -> None:
        from cudal2_ops._extension import _C

        _C.tuning.run_kernel(name, self.a, self.b, None, self.out, self.problem.layout, *knobs)


def runnable_kernels(layout: str, dtype: str, family: str | None = None) -> list[str]:
    """The loaded library's kernels of `layout` and `dtype` (of `family`, when given) that run on this GPU, sorted."""
    import torch

    from cudal2_ops._extension import _C

    major, minor = torch.cuda.get_device_capability()
    return list(_runnable_on(layout, dtype, family, 10 * major + minor, tuple(_C.kernel_libraries())))


@functools.lru_cache(maxsize=None)
def _runnable_on(layout: str, dtype: str, family: str | None, cc: int, libraries: tuple[str, ...]) -> tuple[str, ...]:
    """`runnable_kernels` for compute capability `cc` with `libraries` loaded (keyed on them: the tuner asks once per
    problem, and a library loaded later changes the answer)."""
    from cudal2_ops._extension import _C

    infos = (_C.kernel_info(name) for name in sorted(_C.kernel_names()))
    return tuple(i["name"] for i in infos if i["layout"] == layout and i["dtype"] == dtype
                 and i["sm_min"] <= cc <= i["sm_max"] and family in (None, i["family"]))


def kernel_candidates(problem: Problem, mode: str, base_entry: dict | None,
                      extra: list[tuple[str, Knobs]] = ()) -> list[tuple[str, Knobs]]:
    """Kernels to time for `problem`: none; the base table's kernel for it ("table"); those and the `extra` ones at
    each variant of their family's knob grid too ("knobs": their swizzle, raster and split neighbourhood, which on
    the H200's largest G1000 problems was worth 8% over the default knobs); every loaded kernel of the problem's
    layout and dtype that runs on this GPU, with default knobs, plus the base table's ("all"); or those at their
    default knobs and at each variant of their knob grid (split counts and the like: "grid", what a sweep times). In
    every mode but "none" the `extra` kernels (e.g. a sweep's or a search's fastest on this problem) are added where
    they are among those runnable kernels."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"kernel mode must be one of {KERNEL_MODES}, got {mode!r}")
    if mode == "none":
        return []
    from cudal2_catalog.families import knob_grid

    runnable = runnable_kernels(problem.layout, problem.dtype)
    found = []
    if base_entry and base_entry.get("kernel"):
        found.append((base_entry["kernel"], Knobs.from_dict(base_entry)))
    found += [(name, knobs) for name, knobs in extra if name in runnable and (name, knobs) not in found]
    if mode == "knobs":
        for name in dict.fromkeys(name for name, _ in found):
            variants = [DEFAULT_KNOBS] + knob_grid(name, problem.m, problem.n, problem.k)
            found += [(name, knobs) for knobs in variants if (name, knobs) not in found]
    if mode in ("all", "grid"):
        for name in runnable:
            variants = [DEFAULT_KNOBS] + (knob_grid(name, problem.m, problem.n, problem.k) if mode == "grid" else [])
            found += [(name, knobs) for knobs in variants if (name, knobs) not in found]
    return found


def tune_problem(problem: Problem, kernels: list[tuple[str, Knobs]], margin: float,
                 incumbent: tuple[str, Knobs] | None = None) -> dict:
    """The table entry of one problem (see the module docstring); {} when cuBLASLt has nothing that runs it.
    `incumbent`: the kernel and knobs the base table's entry runs, if it runs one (held by HOLD_MARGIN)."""
    from cudal2_ops import tables
    from cudal2_ops._extension import _C

    run = ProblemRun.make(problem)
    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, problem.layout)
    timed = time_configs(configs, run.run_config)
    if not timed:
        return {}
    heuristic = next((t for t in timed if t.config == configs[0]), None)
    ranked = fastest(timed, lambda c: run.run_config(c.config), always=heuristic)
    best = next((c for c in ranked if run.correct(lambda c=c: run.run_config(c.config))), None)
    if best is None:
        return {}
    # The heuristic's choice is a finalist, re-timed like the chosen one; faster than the chosen one only when it
    # failed the reference check, and then its time is left out (the loader would prefer it: slower_than_heuristic).
    heuristic_us = heuristic.us if heuristic is not None and heuristic.us >= best.us else None
    entry = {"cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, best.config)), "cublaslt_us": round(best.us, 3),
             "baseline": "cublaslt-autotune", "baseline_us": round(best.us, 3), "provenance": "tune"}
    if heuristic_us is not None:
        entry["cublaslt_heuristic_us"] = round(heuristic_us, 3)
    # The correct re-timed configurations within NEAR_TIE of the chosen one, fastest first: its rivals on another card
    # of the model (which of them is fastest differs between cards), timed against it at a problem's first eager call
    # when CUDAL2_CONFIRM_NEAR_TIES=1.
    near = [c for c in ranked[:RETIME_TOP] if c is not best and c.us <= best.us * (1 + NEAR_TIE)
            and run.correct(lambda c=c: run.run_config(c.config))]
    if near:
        entry["cublaslt_near"] = [{"cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, c.config)),
                                   "cublaslt_us": round(c.us, 3)} for c in near]
    kernel_runs = []
    for name, knobs in kernels:
        try:
            us = graph_time_us(lambda: run.run_kernel(name, knobs))
        except RuntimeError:
            continue  # the kernel declines this problem
        kernel_runs.append(Timed(us, kernel=name, knobs=knobs))
    if kernel_runs:
        ranked_kernels = fastest(kernel_runs, lambda c: run.run_kernel(c.kernel, c.knobs))
        win = chosen_kernel(ranked_kernels, best.us, margin, incumbent,
                            lambda c: run.correct(lambda: run.run_kernel(c.kernel, c.knobs)))
        if win is not None:
            entry.update(kernel=win.kernel, **win.knobs.to_dict(), kernel_us=round(win.us, 3),
                         speedup=round(best.us / win.us, 4))
        else:  # what lost and by how much: a near miss against the margin is told from a kernel far behind
            lost = ranked_kernels[0]
            entry["fastest_kernel"] = {"kernel": lost.kernel, **lost.knobs.to_dict(), "us": round(lost.us, 3)}
    return entry


def chosen_kernel(ranked: list[Timed], config_us: float, margin: float, incumbent: tuple[str, Knobs] | None,
                  correct: Callable[[Timed], bool]) -> Timed | None:
    """The kernel an entry takes, from `ranked` (fastest first) against the chosen configuration's `config_us`: the
    fastest that beats it by `margin` and is `correct`; else the `incumbent` (the base table's kernel and knobs) where
    it still beats it by HOLD_MARGIN and is correct; else None. The hold is hysteresis: on the H100 (5735765), the six
    kernel entries a re-tune gave back to cuBLASLt, each kernel timed 1.7-2.8% faster, all lost in the next benchmark
    (docs/DECISIONS.md)."""
    win = next((c for c in ranked if c.us * (1 + margin) <= config_us and correct(c)), None)
    if win is None and incumbent is not None:
        win = next((c for c in ranked if (c.kernel, c.knobs) == incumbent and c.us * (1 + HOLD_MARGIN) <= config_us
                    and correct(c)), None)
    return win


@dataclass
class Summary:
    """What a tuning run changed, for the closing report."""

    tuned: int = 0
    unsupported: list[str] = field(default_factory=list)
    kernels: int = 0
    new: int = 0
    changed: int = 0
    over_heuristic: list[float] = field(default_factory=list)  # heuristic time / chosen time per problem
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # not started before the deadline

    def lines(self) -> list[str]:
        geo = math.exp(statistics.fmean(math.log(r) for r in self.over_heuristic)) if self.over_heuristic else None
        return [f"tuned {self.tuned} problems in {self.seconds:.0f} s: {self.kernels} choose a cudal2 kernel, "
                f"{self.tuned - self.kernels} a cuBLASLt configuration",
                f"{self.new} new entries, {self.changed} changed choices, {len(self.unsupported)} without any runnable "
                f"cuBLASLt algorithm" + (f" (e.g. {self.unsupported[0]})" if self.unsupported else ""),
                "chosen vs cuBLASLt's heuristic choice: " + (f"geomean {geo:.3f}x, median "
                                                             f"{statistics.median(self.over_heuristic):.3f}x, worst "
                                                             f"{min(self.over_heuristic):.3f}x, best "
                                                             f"{max(self.over_heuristic):.3f}x" if geo else "n/a")] + (
            [f"{len(self.skipped)} problems not tuned: the time budget ran out"] if self.skipped else [])


def choice_of(entry: dict) -> tuple:
    """What an entry runs (for 'changed' counts): the kernel with its knobs, else the cuBLASLt configuration."""
    if entry.get("kernel"):
        return ("kernel", entry["kernel"], *Knobs.from_dict(entry))
    return ("cublaslt", tuple(sorted((entry.get("cublaslt") or {}).items())))


def disable_pdl() -> None:
    """Times kernels without programmatic dependent launch, as tables are selected (docs/EVALUATION.md). The kernel
    library reads CUDAL2_DISABLE_PDL once, at its first launch: call this before any kernel runs in the process."""
    os.environ["CUDAL2_DISABLE_PDL"] = "1"


def tune(problems: list[Problem], base_entries: dict, kernels_mode: str = "table", margin: float = DEFAULT_MARGIN,
         progress: bool = True, deadline: float | None = None,
         extra_kernels: dict[str, list[tuple[str, Knobs]]] | None = None) -> tuple[dict, Summary]:
    """Tunes `problems` (see the module docstring); returns their entries and a summary against `base_entries`.
    With a `deadline` (time.perf_counter() value) no problem is started after it; the rest are in summary.skipped.
    `extra_kernels` maps a problem's key to more kernels to time on it (`kernel_candidates`)."""
    from cudal2_ops._extension import _C

    if _C is None:
        raise RuntimeError("cudal2_ops: the compiled extension is not loaded; tuning needs it and a CUDA GPU")
    summary, entries, t0 = Summary(), {}, time.perf_counter()
    for i, problem in enumerate(_progress(problems, progress)):
        if deadline is not None and time.perf_counter() > deadline:
            summary.skipped = [p.key for p in problems[i:]]
            break
        base = base_entries.get(problem.key)
        kernels = kernel_candidates(problem, kernels_mode, base, (extra_kernels or {}).get(problem.key, ()))
        incumbent = (base["kernel"], Knobs.from_dict(base)) if base and base.get("kernel") else None
        entry = tune_problem(problem, kernels, margin, incumbent)
        if not entry:
            summary.unsupported.append(problem.key)
            continue
        entries[problem.key] = entry
        summary.tuned += 1
        summary.kernels += bool(entry.get("kernel"))
        old = base_entries.get(problem.key)
        summary.new += old is None
        summary.changed += old is not None and choice_of(old) != choice_of(entry)
        chosen = entry.get("kernel_us", entry["cublaslt_us"])
        if entry.get("cublaslt_heuristic_us"):
            summary.over_heuristic.append(entry["cublaslt_heuristic_us"] / chosen)
    summary.seconds = time.perf_counter() - t0
    return entries, summary


def _progress(items: list, enabled: bool):
    """tqdm's bar when installed and wanted, else the items with a line every 10%."""
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return _plain_progress(items)
    return tqdm(items, desc="tuning", unit="problem", file=sys.stderr)


def _plain_progress(items: list):
    step = max(1, len(items) // 10)
    for i, item in enumerate(items):
        if i % step == 0:
            print(f"tuning: {i}/{len(items)}", file=sys.stderr, flush=True)
        yield item


def table_header(device: int, base_header: dict | None) -> dict:
    """The header of a tuned table for `device`: what the loader validates plus how it was measured."""
    import torch

    from cudal2_ops import __version__, tables
    from cudal2_ops._extension import _C

    facts = tables.DeviceFacts.of(device)
    header = dict(base_header or {})
    header.update({
        "schema_version": tables.SCHEMA_VERSION, "gpu_name": facts.gpu_name, "sm_count": facts.sm_count,
        "capability": list(facts.capability), "cuda": facts.cuda, "cublaslt_version": int(_C.cublaslt_version()),
        "package_version": __version__, "torch": torch.__version__,
        "tuned": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "timing_protocol": "kernel mode: CUDA-graph replay of back-to-back calls (about 0.15 ms per replay, "
                           f"median of 5; the fastest {RETIME_TOP} and the heuristic's re-timed at about 0.4 ms in "
                           f"{RETIME_ROUNDS} interleaved rounds (median of 3 replays each)), CUDA events; "
                           "PDL off; warm L2; random inputs; fp32-reference check of the choice"})
    header.setdefault("rules", {"nearest_m_up": False})
    return header


def merge_into(path: Path, device: int, entries: dict, base: dict | None, name_run: bool = False) -> dict:
    """Writes `entries` over `base` (a table dict, or None) to `path` atomically; returns the written table. With
    `name_run` the header's `search_run` names this tuning by its time stamp ("tune-<tuned>")."""
    header = table_header(device, (base or {}).get("header"))
    if name_run:
        header["search_run"] = f"tune-{header['tuned']}"
    data = {"header": header, "entries": {**(base or {}).get("entries", {}), **entries}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cudal2_ops.tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=Path, action="append", required=True,
                        help="problems file (cudal2_ops.record_problems writes one); may repeat")
    parser.add_argument("--out", type=Path, help="table to write (default: the user's tuned table for this GPU, "
                        "which the dispatcher overlays on the shipped one)")
    parser.add_argument("--base", type=Path, help="table whose entries are kept for problems not tuned here "
                        "(default: --out when it exists)")
    parser.add_argument("--kernels", choices=KERNEL_MODES, default="all",
                        help="kernels timed beside cuBLASLt: the loaded table's kernel for the problem (table), that "
                        "kernel at each split and knob variant (knobs), every loaded kernel of its layout and dtype "
                        "(all, the default), those at each split and knob variant too (grid: slower, finds more on "
                        "small problems), or none")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help="a kernel must beat the best cuBLASLt configuration by this fraction (default 0.03)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if not 0 <= args.margin < 1:
        parser.error(f"--margin must be in [0, 1), got {args.margin}")
    import torch

    import cudal2_ops
    from cudal2_ops import tables

    if not torch.cuda.is_available() or not cudal2_ops.is_compiled():
        print("python -m cudal2_ops.tune: needs a CUDA GPU and the compiled extension "
              f"(GPU visible: {torch.cuda.is_available()}, extension loaded: {cudal2_ops.is_compiled()})",
              file=sys.stderr)
        return 2
    try:
        problems = sorted({p for f in args.problems for p in read_problems(f)})
    except ValueError as exc:
        print(f"python -m cudal2_ops.tune: {exc}", file=sys.stderr)
        return 2
    disable_pdl()
    device = torch.cuda.current_device()
    facts = tables.DeviceFacts.of(device)
    out = args.out or tables.tuned_table_file(facts)
    base_path = args.base or (out if out.exists() else None)
    base = json.loads(base_path.read_text()) if base_path else None
    loaded = tables.load_table_for(facts)  # the kernels the dispatcher would run now ("table" candidates)
    known = {**(loaded.entries if loaded else {}), **((base or {}).get("entries", {}))}
    entries, summary = tune(problems, known, args.kernels, args.margin, progress=not args.no_progress)
    merge_into(out, device, entries, base)
    for line in summary.lines():
        print(line)
    print(f"wrote {out} ({len(entries)} tuned entries); the dispatcher loads it in new processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
