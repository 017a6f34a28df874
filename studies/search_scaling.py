"""`python -m studies.search_scaling`: evaluations per minute of the same search on 1, 2, 4, 8 ... Ray workers
(search/backends/ray_backend.py), written to one JSON file and a Markdown table beside it, with the environment.

Each worker count runs the same search from scratch (same shapes, seed, policy and budget, a fresh store) on a
RayBackend of that many evaluator actors, started before the clock starts. On a GPU host (`--artifacts DIR`) a
worker is one GPU (LocalBackend in the actor, nvcc builds as Ray tasks into DIR, whose object cache makes the later
runs' builds links); with `--simulated` a worker is a simulated evaluator that sleeps `--sim-delay-ms` per
evaluation, which measures the backend's dispatch and the loop's own per-evaluation cost on this machine, nothing of
a GPU's. A simulated study also runs the largest worker count with no delay: the loop's ceiling here.

    python -m studies.search_scaling --simulated --out benchmarks/results/simulated/search_scaling.json
    python -m studies.search_scaling --artifacts build/search --shapes sample100 --budget-evals 1600 \\
        --out benchmarks/results/<gpu_slug>/search_scaling.json                     # on an 8-GPU host
"""
from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

from cudal2_testing.measure.env import git_commit
from search import ray_cluster
from search.backends.ray_backend import RayBackend
from search.candidate import Problem
from search.cli_args import load_shapes
from search.loop import RunArgs, Search
from search.store import Store
from studies.report_files import write_report

# The one-H200 search run of 2026-11-25 (benchmarks/results/nvidia_h200/search_store_2026-11-25_4a7bcf5.sqlite.gz):
# 400 evaluations in 183.5 s from the first verdict to the last, 0.46 s each.
REAL_EVAL_MS = 460.0


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor())


def environment(ray) -> dict:
    """This machine, the Ray cluster and the versions the study ran with."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(), "python": sys.version.split()[0], "ray": ray.__version__,
            "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "cluster_resources": ray.cluster_resources(),
            "command": shlex.join(["python", "-m", "studies.search_scaling", *sys.argv[1:]])}


def make_backend(ns: argparse.Namespace, workers: int, delay_ms: float) -> RayBackend:
    """The RayBackend of one worker count: simulated actors, or one GPU each."""
    if ns.simulated:
        return RayBackend.simulated(workers, seed=ns.seed, eval_delay_s=delay_ms / 1000, arch=ns.arch)
    return RayBackend.on_gpus(ns.artifacts, ns.arch, workers=workers)


def measure(ns: argparse.Namespace, problems: list[Problem], workers: int, delay_ms: float, folder: Path) -> dict:
    """One run of the search on `workers` actors: evaluations, wall time, rates, where the actors ran, faults,
    and a digest of the verdicts (equal across worker counts for a deterministic evaluator)."""
    args = RunArgs(policy=ns.policy, budget_evals=ns.budget_evals, seed=ns.seed, arch=ns.arch, backend="ray",
                   artifacts=str(ns.artifacts or ""), sim_delay_ms=delay_ms, max_builds=ns.max_builds)
    backend = make_backend(ns, workers, delay_ms)
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(folder / f"workers{workers}_delay{delay_ms:g}.sqlite")
    try:
        placements = backend.placements()  # the actors are up before the clock starts
        began = time.perf_counter()
        search = Search.start(store, backend, args, problems)
        search.run()
        wall_s = time.perf_counter() - began
        rows = store.evaluations(search.run_id)
        gpu = json.loads(store.run(search.run_id)["environment"])
    finally:
        store.close()
        backend.close()
    verdicts = json.dumps([(r["candidate_id"], r["problem_key"], r["status"], r["us"]) for r in rows])
    span_s = rows[-1]["created"] - rows[0]["created"] if len(rows) > 1 else 0.0
    return {"workers": workers, "eval_delay_ms": delay_ms, "evaluations": len(rows), "wall_s": round(wall_s, 2),
            "evals_per_min": round(60 * len(rows) / wall_s, 1),
            "first_to_last_verdict_s": round(span_s, 2), "gpu_name": gpu.get("gpu_name"),
            "statuses": dict(collections.Counter(r["status"] for r in rows)),
            "placements": placements, "faults": backend.faults,
            "verdicts_sha256": hashlib.sha256(verdicts.encode()).hexdigest()}


def markdown(doc: dict) -> str:
    """The study as a Markdown page: what it measured and its bounds, the table, the environment."""
    env, runs = doc["environment"], doc["runs"]
    base = runs[0]["evals_per_min"]
    lines = [f"# Search scaling over Ray workers ({doc['mode']}, {env['date'][:10]})", "", doc["what"], "",
             "| workers | evaluations | wall s | evaluations/min | x 1 worker | per-worker efficiency | "
             "same verdicts as the first run |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        ratio = run["evals_per_min"] / base
        lines.append(f"| {run['workers']} | {run['evaluations']} | {run['wall_s']} | {run['evals_per_min']} | "
                     f"{ratio:.2f} | {ratio / run['workers']:.0%} | "
                     f"{'yes' if run['verdicts_sha256'] == runs[0]['verdicts_sha256'] else 'no'} |")
    if ceiling := doc.get("ceiling"):
        lines += ["", f"The loop's ceiling here (the same search on {ceiling['workers']} simulated workers with no "
                      f"delay): {ceiling['evals_per_min']} evaluations/min ({ceiling['wall_s']} s for "
                      f"{ceiling['evaluations']})."]
    s = doc["settings"]
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(runs[0]["statuses"].items()))
    lines += ["", f"Search: {s['shapes']} fp16 NT shapes, policy {s['policy']}, seed {s['seed']}, "
                  f"{s['budget_evals']} evaluations per run ({statuses} in the first run; a compile error is "
                  f"recorded without being evaluated), sm{s['arch']}.",
              f"Machine: {env['cpu']}, {env['cpus_usable']} usable CPU cores of {env['cpu_count']}; load average "
              f"{', '.join(f'{x:.2f}' for x in env['load_average'])} at the start; Python {env['python']}, Ray "
              f"{env['ray']}; commit {env['commit']}.",
              f"Command: `{env['command']}`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.search_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results; the Markdown goes beside it (.md)")
    parser.add_argument("--workers", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8],
                        help="worker counts, comma-separated (default 1,2,4,8)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--simulated", action="store_true", help="simulated evaluators (no GPU)")
    mode.add_argument("--artifacts", type=Path, help="GPU workers: the builds folder (nvcc)")
    parser.add_argument("--sim-delay-ms", type=float, default=REAL_EVAL_MS,
                        help=f"--simulated: time per evaluation (default {REAL_EVAL_MS:g}, one H200's)")
    parser.add_argument("--shapes", default="sample50", help="g1000 | llm | sampleN | FILE (default sample50)")
    parser.add_argument("--budget-evals", type=int, default=600)
    parser.add_argument("--policy", default="rl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--max-builds", type=int, default=None, help="new builds per run (default: unlimited)")
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster instead of starting one")
    ns = parser.parse_args(argv)
    if ns.workers[0] != 1:
        parser.error(f"--workers must start with 1 (the rates are compared with one worker's), got {ns.workers}")
    import ray  # noqa: PLC0415 (after the arguments: --help works without ray)
    problems = [Problem("nt", "fp16", *s) for s in load_shapes(ns.shapes, ns.seed)]
    connected = ray_cluster.connect(ns.ray_address)
    try:
        env = environment(ray)
        with tempfile.TemporaryDirectory(prefix="search_scaling_") as folder:
            # untimed: Ray's task workers start, imports load (on GPUs: the builds are made, the clocks ramp up)
            warmup = measure(ns, problems, max(ns.workers), 0.0, Path(folder) / "warmup")
            runs = [measure(ns, problems, n, ns.sim_delay_ms if ns.simulated else 0.0, Path(folder))
                    for n in ns.workers]
            ceiling = measure(ns, problems, max(ns.workers), 0.0, Path(folder)) if ns.simulated else None
        env["load_average_end"] = os.getloadavg()
    finally:
        if connected:
            ray.shutdown()
    cores = env["cpus_usable"]
    basis = " (one H200's wall time per evaluation in the 2026-11-25 search run)" * (ns.sim_delay_ms == REAL_EVAL_MS)
    what = (f"Simulated evaluators on {cores} CPU cores: each evaluation sleeps {ns.sim_delay_ms:g} ms{basis}, "
            f"builds are the simulator's (instant); an untimed warm-up run came first. "
            f"This measures the Ray backend's dispatch and the search loop's own cost per evaluation on this "
            f"machine (proposals, SQLite writes, policy updates, all in one driver process), which is what bounds "
            f"scaling once GPUs are many; it says nothing of GPU contention, the CPU load of real evaluation "
            f"workers, nvcc throughput or a host's PCIe/NUMA layout, and {cores} cores shared with other work "
            f"bound what it can show." if ns.simulated else
            f"GPU evaluators: one per GPU ({runs[0]['gpu_name']}), nvcc builds as Ray tasks into {ns.artifacts}; an "
            f"untimed warm-up run on {max(ns.workers)} GPUs came first (its builds made, the clocks up).")
    doc = {"study": "search_scaling", "mode": "simulated" if ns.simulated else "gpu", "what": what,
           "settings": {**vars(ns), "out": str(ns.out), "artifacts": str(ns.artifacts or ""),
                        "problems": len(problems)},
           "environment": env, "warmup": warmup, "runs": runs, "ceiling": ceiling}
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    write_report(ns.out.with_suffix(".md"), markdown(doc).splitlines() + [""], doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
