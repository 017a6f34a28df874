"""`python -m studies.simulator_calibration`: how well the simulated GPU (search/simulate.py) ranks real kernels, and
its constants fitted to real measurements.

Real measurements: the committed sweeps (`python -m search.sweep`: the built kernels at their knob grids, per
problem) and search stores (`python -m search run --backend local`: the policy's and random search's candidates),
each a set of problems with the kernel-mode time of every correct candidate and of cuBLASLt-autotune. Problems are
split by (M, N, K) into a fit half and a held-out half (a seeded hash: the NN, NT and bf16 rows of a shape fall on
the same side, in every source). The constants of the arch-90 model (`search.simulate.parameters`) are fitted on the
fit half of `--fit` sources by a coordinate search over multiplicative steps, each constant kept within BOUND of its
analytic value, maximising the mean per-problem Spearman rank correlation between simulated and real candidate times
minus SPEEDUP_WEIGHT times the speedup error (below; ranks alone let the level drift far from real speedups, which
the search's reward is made of); every source of `--report` is then scored on its held-out problems, analytic model
against fitted model:

- Spearman: mean over problems (>= 3 distinct candidates) of the rank correlation, with a bootstrap 95% interval
  over problems; "searched" restricts a source to configs outside the built default set (the space a search
  explores; only the store and one candidate sweep measured such configs);
- winner: problems where the model's fastest candidate is the real fastest; regret: geomean of the real time of the
  model's fastest over the real fastest;
- speedup error: median over problems of |log(simulated best speedup / real best speedup)| (simulated cuBLASLt is
  the model's baseline kernels, real cuBLASLt the measured autotune time);
- ceiling: the same Spearman between two real sources on their common (problem, kernel, knobs), what a perfect
  model of one run could reach against another.

    python -m studies.simulator_calibration --out benchmarks/results/simulated/simulator_calibration.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
import zlib
from pathlib import Path

import numpy as np

from cudal2_catalog.codegen import default_configs
from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_ops.tables import parse_key
from cudal2_testing.measure.summary import geomean, markdown_table
from search.candidate import OK, Problem
from search.simulate import ANALYTIC_GPUS, SimGpu, baseline_model_us, model_us, parameters, with_parameters
from search.store import read_store
from search.table_select import read_sweep

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
STORE = RESULTS / "nvidia_h200" / "search_store_2026-11-25_4a7bcf5.sqlite.gz"
H200_SWEEP = RESULTS / "nvidia_h200" / "sweep_2026-11-23_cc51879.json.gz"
H100_SWEEP = RESULTS / "nvidia_h100_80gb_hbm3" / "sweep_2026-11-25_a3fd6a0.json.gz"
CEILING_PAIRS = ((H200_SWEEP, RESULTS / "nvidia_h200" / "sweep_2026-11-23_4da71c4.json.gz"), (H200_SWEEP, H100_SWEEP))
STEPS = (0.5, 0.7, 0.85, 1.2, 1.4, 2.0)  # multiplicative moves of one constant tried per pass
PASSES = 3
BOUND = 1.5            # a fitted constant stays within [analytic / BOUND, analytic * BOUND]
SPEEDUP_WEIGHT = 0.5   # objective: mean Spearman - this x median |log(simulated / real best speedup)|
BOOTSTRAP = 1000
MIN_CANDIDATES = 3


@dataclasses.dataclass(frozen=True)
class Sample:
    """One problem's real measurements in one source: every correct candidate (its fastest time when measured
    more than once) and the cuBLASLt-autotune time."""

    source: str
    problem: Problem
    baseline_us: float
    configs: tuple[tuple[HgemmConfig, Knobs], ...]
    us: tuple[float, ...]
    searched: tuple[bool, ...]   # the config is outside the built default set


def _sample(source: str, problem: Problem, baseline_us: float, timed: dict[tuple[str, Knobs], float],
            defaults: set[str]) -> Sample:
    keys = sorted(timed)
    return Sample(source, problem, baseline_us, tuple((HgemmConfig.from_name(n), kn) for n, kn in keys),
                  tuple(timed[k] for k in keys), tuple(n not in defaults for n, _ in keys))


def from_sweep(path: Path) -> list[Sample]:
    """The problems of a sweep results file with their correct timed candidates."""
    defaults = {cfg.name for cfg in default_configs()}
    out = []
    for row in read_sweep(path)["rows"]:
        timed: dict[tuple[str, Knobs], float] = {}
        for c in row["candidates"]:
            if c.get("correct") and c.get("us"):
                key = (c["kernel"], Knobs.from_dict(c))
                timed[key] = min(c["us"], timed.get(key, math.inf))
        if timed and row.get("baseline_us"):
            problem = Problem(row["layout"], row["dtype"], row["m"], row["n"], row["k"])
            out.append(_sample(path.name, problem, row["baseline_us"], timed, defaults))
    return out


def from_store(path: Path) -> list[Sample]:
    """The problems of a search store (`.sqlite`, or `.sqlite.gz` as committed) with their OK config candidates
    (baseline: the median of the problem's baseline times)."""
    with read_store(path) as store:
        rows = [(r["problem_key"], store.candidate(r["candidate_id"]), r["us"], r["baseline_us"])
                for r in store.evaluations() if r["status"] == OK]
    defaults = {cfg.name for cfg in default_configs()}
    timed: dict[str, dict[tuple[str, Knobs], float]] = {}
    baselines: dict[str, list[float]] = {}
    for key, cand, us, base in rows:
        if cand.config:
            slot = timed.setdefault(key, {})
            slot[(cand.config, Knobs(*cand.knobs))] = min(us, slot.get((cand.config, Knobs(*cand.knobs)), math.inf))
            baselines.setdefault(key, []).append(base)
    return [_sample(path.name, Problem(*parse_key(key)), float(np.median(baselines[key])), t, defaults)
            for key, t in timed.items()]


def load(path: Path) -> list[Sample]:
    """A store (.sqlite[.gz], .db) or a sweep file (.json[.gz])."""
    if ".sqlite" in path.suffixes or path.suffix == ".db":
        return from_store(path)
    return from_sweep(path)


def held_out(problem: Problem, seed: int) -> bool:
    """Whether the (M, N, K) of `problem` is in the held-out half for split `seed`."""
    return zlib.crc32(f"{seed}:{problem.m}x{problem.n}x{problem.k}".encode()) % 2 == 1


def ranks(values) -> np.ndarray:
    """0-based ranks, ties sharing their mean rank."""
    x = np.asarray(values, dtype=float)
    out = np.empty(len(x))
    out[np.argsort(x, kind="mergesort")] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=out) / counts)[inverse]


def spearman(a, b) -> float:
    """Spearman's rank correlation of two sequences (nan when either is constant)."""
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def simulated_us(sample: Sample, gpu: SimGpu) -> np.ndarray:
    """The noise-free simulated time of every candidate of `sample`."""
    p = sample.problem
    return np.array([model_us(cfg, knobs, p.m, p.n, p.k, gpu) for cfg, knobs in sample.configs])


def _restricted(sample: Sample, searched_only: bool) -> Sample:
    if not searched_only:
        return sample
    keep = [i for i, s in enumerate(sample.searched) if s]
    return dataclasses.replace(sample, configs=tuple(sample.configs[i] for i in keep),
                               us=tuple(sample.us[i] for i in keep), searched=tuple(True for _ in keep))


def mean_spearman(samples: list[Sample], gpu: SimGpu) -> float:
    """Mean per-problem Spearman of simulated against real times (problems with >= MIN_CANDIDATES candidates)."""
    values = [spearman(simulated_us(s, gpu), s.us) for s in samples if len(s.us) >= MIN_CANDIDATES]
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def speedup_error(sample: Sample, gpu: SimGpu) -> float:
    """|log(simulated best speedup / real best speedup)| of one problem (each against its own cuBLASLt)."""
    simulated = baseline_model_us(sample.problem, gpu) / simulated_us(sample, gpu).min()
    return abs(math.log(simulated / (sample.baseline_us / min(sample.us))))


def objective(samples: list[Sample], gpu: SimGpu) -> float:
    """What the fit maximises: mean Spearman - SPEEDUP_WEIGHT x median speedup error."""
    return mean_spearman(samples, gpu) - SPEEDUP_WEIGHT * float(np.median([speedup_error(s, gpu) for s in samples]))


def scores(samples: list[Sample], gpu: SimGpu, seed: int = 0) -> dict:
    """Spearman (mean, bootstrap 95% interval), winner, regret and speedup error of `gpu`'s model on `samples`."""
    rhos, winners, regrets = [], 0, []
    for s in samples:
        if len(s.us) < MIN_CANDIDATES:
            continue
        sim, real = simulated_us(s, gpu), np.array(s.us)
        rho = spearman(sim, real)
        if math.isnan(rho):
            continue
        rhos.append(rho)
        winners += int(real[int(np.argmin(sim))] == real.min())
        regrets.append(real[int(np.argmin(sim))] / real.min())
    if not rhos:
        return {"problems": 0}
    rng = np.random.default_rng(seed)
    boot = [float(np.mean(rng.choice(rhos, len(rhos)))) for _ in range(BOOTSTRAP)]
    return {"problems": len(rhos), "spearman": float(np.mean(rhos)),
            "spearman_ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "winner": winners, "regret": geomean(regrets),
            "speedup_error": float(np.median([speedup_error(s, gpu) for s in samples]))}


def fit(samples: list[Sample], start: SimGpu, log=print) -> tuple[SimGpu, dict[str, float]]:
    """The constants of `start` moved one at a time by the factors of STEPS (within BOUND of their start), for
    PASSES passes, wherever the move raises the objective on `samples`; the fitted GPU and its constants."""
    initial = parameters(start)
    values = dict(initial)
    gpu, best = start, objective(samples, start)
    log(f"fit: {len(samples)} problems, objective at the start {best:.4f}")
    for sweep in range(PASSES):
        for name in initial:
            for step in STEPS:
                value = values[name] * step
                if not initial[name] / BOUND <= value <= initial[name] * BOUND:
                    continue
                trial = with_parameters(gpu, {name: value})
                score = objective(samples, trial)
                if score > best + 1e-4:
                    gpu, best, values = trial, score, parameters(trial)
            log(f"  pass {sweep}: {name} = {values[name]:.4g} (x{values[name] / initial[name]:.3g}): {best:.4f}")
    return gpu, values


def ceiling(a: list[Sample], b: list[Sample], seed: int) -> dict:
    """The Spearman between two real sources on the held-out problems and candidates they share."""
    other = {s.problem: s for s in b}
    rhos = []
    for s in a:
        t = other.get(s.problem)
        if t is None or not held_out(s.problem, seed):
            continue
        times = dict(zip(t.configs, t.us))
        common = [(u, times[c]) for c, u in zip(s.configs, s.us) if c in times]
        if len(common) >= MIN_CANDIDATES:
            rho = spearman(*zip(*common))
            if not math.isnan(rho):
                rhos.append(rho)
    return {"problems": len(rhos), "spearman": float(np.mean(rhos)) if rhos else math.nan}


def _cell(score: dict) -> list[str]:
    lo, hi = score["spearman_ci95"]
    return [str(score["problems"]), f"{score['spearman']:.3f} [{lo:.3f}, {hi:.3f}]",
            f"{score['winner']}", f"{score['regret']:.3f}", f"{score['speedup_error']:.3f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.simulator_calibration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results; the Markdown goes beside it (.md)")
    parser.add_argument("--fit", type=Path, nargs="+", default=[STORE, H200_SWEEP, H100_SWEEP],
                        help="sources whose fit-half problems the constants are fitted to")
    parser.add_argument("--report", type=Path, nargs="+",
                        default=[STORE] + sorted(RESULTS.glob("*/sweep_*.json*")),
                        help="sources scored on their held-out problems")
    parser.add_argument("--seed", type=int, default=0, help="the problem split")
    args = parser.parse_args(argv)
    began = time.monotonic()
    loaded = {path: load(path) for path in dict.fromkeys(args.fit + args.report)}
    fit_samples = [s for path in args.fit for s in loaded[path] if not held_out(s.problem, args.seed)]
    analytic = ANALYTIC_GPUS[90]
    constants = {k: float(f"{v:.4g}") for k, v in fit(fit_samples, analytic)[1].items()}  # as simulate.py spells them
    fitted = with_parameters(analytic, constants)
    rows, results = [], []
    for path in args.report:
        views = [("all", False)] + ([("searched", True)] if any(any(s.searched) for s in loaded[path]) else [])
        for view, searched_only in views:
            test = [_restricted(s, searched_only) for s in loaded[path] if held_out(s.problem, args.seed)]
            test = [s for s in test if s.us]
            before, after = scores(test, analytic, args.seed), scores(test, fitted, args.seed)
            if not before["problems"]:
                continue
            label = f"{path.parent.name}/{path.name}" + (" (searched configs)" if searched_only else "")
            results.append({"source": label, "analytic": before, "fitted": after})
            rows.append([label] + _cell(before) + _cell(after)[1:])
    ceilings = [{"a": f"{a.parent.name}/{a.name}", "b": f"{b.parent.name}/{b.name}",
                 **ceiling(loaded.get(a) or load(a), loaded.get(b) or load(b), args.seed)} for a, b in CEILING_PAIRS]
    from cudal2_testing.measure.env import git_commit  # imports torch: only for the header
    doc = {"header": {"study": "studies/simulator_calibration.py", "commit": git_commit(), "seed": args.seed,
                      "fit_sources": [str(p.relative_to(RESULTS.parent.parent)) for p in args.fit],
                      "fit_problems": len(fit_samples), "model": "search/simulate.py ANALYTIC_GPUS[90]",
                      "wall_s": round(time.monotonic() - began, 1)},
           "constants": {"analytic": parameters(analytic), "fitted": constants},
           "held_out": results, "ceiling": ceilings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    head = ["problems", "Spearman [95% CI]", "winner", "regret", "speedup error"]
    lines = ["# The simulated GPU against real measurements (held-out problems)", "",
             f"Constants of the arch-90 model fitted on the fit half (split seed {args.seed}; {len(fit_samples)} "
             f"problems) of {', '.join(p.name for p in args.fit)} (objective: mean Spearman - {SPEEDUP_WEIGHT} x "
             f"median speedup error; each constant within x{BOUND} of its analytic value); every row scores its "
             "source's held-out half (no (M, N, K) of it was fitted). Analytic: search/simulate.py's hand-set "
             "constants (ANALYTIC_GPUS[90]); fitted: the constants below. Searched configs: a source's candidates "
             "outside the built default set (the space a search explores beyond the sweep). Definitions: the "
             "study's docstring.", ""]
    lines += markdown_table(["source"] + [f"analytic {h}" for h in head] + [f"fitted {h}" for h in head[1:]], rows)
    lines += ["", "Ceiling (two real sources on their shared held-out problems and candidates):", ""]
    lines += markdown_table(["a", "b", "problems", "Spearman"],
                            [[c["a"], c["b"], c["problems"], f"{c['spearman']:.3f}"] for c in ceilings])
    lines += ["", "Fitted constants (analytic -> fitted):", ""]
    lines += markdown_table(["constant", "analytic", "fitted"],
                            [[k, f"{v:.4g}", f"{constants[k]:.4g}"] for k, v in parameters(analytic).items()])
    lines += ["", f"Commit {doc['header']['commit']}; command: `python -m studies.simulator_calibration --out "
              f"{args.out}`; {doc['header']['wall_s']} s."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
