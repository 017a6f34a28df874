"""`python -m search`: run, resume, report, emit and export the kernel search (see search/README.md).

    python -m search run --arch sm90 --dtype fp16 --layout nt --shapes sample100 --budget-evals 2000 --store s.db
    python -m search resume --store s.db
    python -m search report --store s.db --out report/
    python -m search emit --store s.db [--kernel-budget 48]
    python -m search export --store s.db --out rl.jsonl
    python -m search findings --store s.db --sweep sweep.json --out findings.md
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

from cudal2_ops.measure import shapes as shape_sets
from search.backend import Backend
from search.candidate import Problem
from search.config import DTYPES, LAYOUTS
from search.loop import POLICIES, RunArgs, Search
from search.store import Store
from search.table_select import DEFAULT_KERNEL_BUDGET, DEFAULT_MARGIN

BACKENDS = ("sim", "local", "ray")
# New builds a run may compile by default: an sm90 kernel takes 60-90 s of nvcc; the simulator's are free.
DEFAULT_MAX_BUILDS = {"sim": None, "local": 32, "ray": 32}


def parse_arch(text: str) -> int:
    """'sm90' -> 90."""
    match = re.fullmatch(r"sm_?(\d{2,3})a?", text)
    if not match:
        raise argparse.ArgumentTypeError(f"arch must look like sm90 or sm80, got {text!r}")
    return int(match[1])


def load_shapes(spec: str, seed: int) -> list[tuple[int, int, int]]:
    """The (M, N, K) of `--shapes`: g1000, llm, sampleN (a stratified N-shape G1000 sample) or a FILE (a JSON list
    of [M, N, K], or one "M N K" / "M,N,K" per line)."""
    if spec in ("g1000", "llm"):
        return shape_sets.load(spec)
    if match := re.fullmatch(r"sample(\d+)", spec):
        return shape_sets.load("g1000", int(match[1]), seed)
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"--shapes {spec!r}: not g1000, llm, sampleN or an existing file")
    text = path.read_text()
    rows = json.loads(text) if text.lstrip().startswith("[") else [re.split(r"[,\s]+", line.strip())
                                                                   for line in text.splitlines() if line.strip()]
    shapes = [tuple(int(x) for x in row) for row in rows]
    if any(len(s) != 3 or min(s) < 1 for s in shapes):
        raise ValueError(f"{path}: every shape must be three positive integers M N K")
    return shapes


def make_backend(args: RunArgs) -> Backend:
    """The backend a run names (local and ray come from search.backends; ray is an optional extra)."""
    if args.backend == "sim":
        from search.simulate import SimulatedBackend
        return SimulatedBackend(seed=args.seed, eval_delay_s=args.sim_delay_ms / 1000, arch=args.arch)
    if args.backend == "local":
        from search.backends.local import LocalBackend
        return LocalBackend(artifacts=Path(args.artifacts), arch=args.arch, compile_only=args.compile_only)
    if args.backend == "ray":
        from search.backends.ray_backend import RayBackend
        return RayBackend(artifacts=Path(args.artifacts), arch=args.arch, compile_only=args.compile_only)
    raise ValueError(f"unknown backend {args.backend!r}; supported: {BACKENDS}")


def drive(search: Search, quiet: bool) -> None:
    """Runs the loop with a tqdm bar of evaluations and the best geomean speedup so far."""
    if quiet:
        search.run()
    else:
        from tqdm import tqdm
        bar = tqdm(total=search.args.budget_evals, initial=search.store.evaluation_count(search.run_id),
                   unit="eval", desc=f"search {search.args.policy}")

        def progress(count: int, best: float) -> None:
            bar.update(count - bar.n)
            bar.set_postfix_str(f"best geomean {best:.3f}")

        search.on_eval = progress
        try:
            search.run()
        finally:
            bar.close()
    best = search.best_speedups()
    print(f"run {search.run_id}: {search.store.evaluation_count(search.run_id)} evaluations, "
          f"{len(best)}/{len(search.problems)} problems measured")


def cmd_run(ns: argparse.Namespace) -> int:
    args = RunArgs(policy=ns.policy, llm=ns.llm, per_round=ns.per_round, explore=ns.explore,
                   budget_evals=ns.budget_evals, budget_minutes=ns.budget_minutes, seed=ns.seed,
                   compile_only=ns.compile_only, memory=ns.memory, arch=ns.arch, backend=ns.backend,
                   artifacts=str(ns.artifacts or ""), sim_delay_ms=ns.sim_delay_ms,
                   max_builds=ns.max_builds if ns.max_builds is not None else DEFAULT_MAX_BUILDS[ns.backend],
                   warm_start=[str(p) for p in ns.warm_start])
    if args.backend != "sim" and not args.artifacts:
        raise SystemExit(f"--backend {args.backend} needs --artifacts DIR (where builds are kept)")
    problems = [Problem(ns.layout, ns.dtype, *s) for s in load_shapes(ns.shapes, ns.seed)]
    store = Store(ns.store)
    backend = make_backend(args)
    try:
        search = Search.start(store, backend, args, problems)
        if args.compile_only:
            search.run()
            print(f"run {search.run_id}: compiled {len(store.query('SELECT * FROM compiles'))} builds into "
                  f"{args.artifacts}; evaluate with: python -m search resume --store {ns.store} --backend local "
                  f"--artifacts {args.artifacts}")
        else:
            drive(search, ns.quiet)
    finally:
        backend.close()
        store.close()
    return 0


def cmd_resume(ns: argparse.Namespace) -> int:
    store = Store(ns.store)
    run_id = ns.run or store.unfinished_run()
    if run_id is None:
        raise SystemExit(f"{ns.store}: every run has finished (name one with --run to extend its budget)")
    overrides = {k: v for k, v in (("backend", ns.backend), ("artifacts", ns.artifacts and str(ns.artifacts)),
                                   ("budget_evals", ns.budget_evals), ("budget_minutes", ns.budget_minutes),
                                   ("max_builds", ns.max_builds))
                 if v is not None}
    stored = RunArgs(**{**json.loads(store.run(run_id)["args"]), **overrides})
    backend = make_backend(dataclasses.replace(stored, compile_only=False))
    try:
        drive(Search.resume(store, backend, run_id, overrides), ns.quiet)
    finally:
        backend.close()
        store.close()
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from search.run_report import write_report
    store = Store(ns.store)
    print(write_report(store, ns.out))
    return 0


def cmd_emit(ns: argparse.Namespace) -> int:
    from search.emit import emit
    store = Store(ns.store)
    for path in emit(store, ns.root, ns.kernel_budget, ns.margin, ns.run):
        print(path)
    return 0


def cmd_export(ns: argparse.Namespace) -> int:
    from search.export import export
    count = export(Store(ns.store), ns.out)
    print(f"{ns.out}: {count} records")
    return 0


def cmd_findings(ns: argparse.Namespace) -> int:
    from search.emit import sweep_of
    from search.findings import findings_lines
    from search.table_select import read_sweep
    sections = []
    for path in ns.store:
        store = Store(path)
        sections += [(f"store {path.name}, {s['environment']['gpu_name']}", s["rows"]) for s in sweep_of(store)]
        store.close()
    for path in ns.sweep:
        sweep = read_sweep(path)
        sections.append((f"sweep {path.name}, {sweep['environment']['gpu_name']}", sweep["rows"]))
    if not sections:
        raise SystemExit("give at least one --store or --sweep")
    lines = ["# What the search found", ""]
    for title, rows in sections:
        lines += [f"## {title}", ""] + findings_lines(rows) + [""]
    ns.out.write_text("\n".join(lines))
    print(ns.out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m search", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start a search run")
    run.add_argument("--arch", type=parse_arch, default=90, help="target GPU architecture, e.g. sm90")
    run.add_argument("--dtype", choices=DTYPES, default="fp16")
    run.add_argument("--layout", choices=LAYOUTS, default="nt")
    run.add_argument("--shapes", default="sample100", help="g1000 | llm | sampleN | FILE (M N K per line or JSON)")
    run.add_argument("--budget-minutes", type=float, default=None)
    run.add_argument("--budget-evals", type=int, default=None)
    run.add_argument("--policy", choices=POLICIES, default="rl")
    run.add_argument("--llm", default="none", help="none (default) | openai (endpoint from the environment)")
    run.add_argument("--backend", choices=BACKENDS, default="sim")
    run.add_argument("--store", type=Path, default=Path("search.db"))
    run.add_argument("--compile-only", action="store_true",
                     help="propose one round and compile it into --artifacts, no GPU; evaluate later with resume")
    run.add_argument("--artifacts", type=Path, default=None, help="folder of compiled builds (local/ray backends)")
    run.add_argument("--max-builds", type=int, default=None,
                     help="new builds the run may compile (default: 32 for local/ray, unlimited for sim); past it, "
                          "only built kernels (the extension's defaults included) are proposed")
    run.add_argument("--per-round", type=int, default=4, help="proposals per problem per round")
    run.add_argument("--warm-start", type=Path, nargs="+", default=[], metavar="FILE",
                     help="earlier measurements the rl policy is fit to before the run proposes anything: "
                          "python -m search.sweep files (.json, .json.gz) and search stores (.sqlite, .db), of this "
                          "GPU or another (search/warm_start.py)")
    run.add_argument("--explore", type=float, default=0.0, help="share of random proposals next to the policy (rl)")
    run.add_argument("--memory", default="", help="contextual-memory file for LLM prompts (updated every round)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--sim-delay-ms", type=float, default=0.0, help="simulated backend: sleep per evaluation")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    resume = sub.add_parser("resume", help="continue the store's unfinished run")
    resume.add_argument("--store", type=Path, required=True)
    resume.add_argument("--run", default=None, help="run id (default: the latest unfinished run)")
    resume.add_argument("--backend", choices=BACKENDS, default=None, help="override the run's backend")
    resume.add_argument("--artifacts", type=Path, default=None)
    resume.add_argument("--budget-evals", type=int, default=None, help="override the run's evaluation budget")
    resume.add_argument("--budget-minutes", type=float, default=None)
    resume.add_argument("--max-builds", type=int, default=None, help="override the run's build budget")
    resume.add_argument("--quiet", action="store_true")
    resume.set_defaults(func=cmd_resume)
    report = sub.add_parser("report", help="Markdown + plots of a store")
    report.add_argument("--store", type=Path, required=True)
    report.add_argument("--out", type=Path, required=True)
    report.set_defaults(func=cmd_report)
    emit = sub.add_parser("emit", help="write the table and kernel sources of the store's winners")
    emit.add_argument("--store", type=Path, required=True)
    emit.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent / "kernels")
    emit.add_argument("--kernel-budget", type=int, default=DEFAULT_KERNEL_BUDGET,
                      help="most distinct kernels per (arch, layout, dtype)")
    emit.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    emit.add_argument("--run", default=None, help="only this run's evaluations (default: all runs of the store)")
    emit.set_defaults(func=cmd_emit)
    export = sub.add_parser("export", help="(prompt, completion, reward) JSONL for RL fine-tuning")
    export.add_argument("--store", type=Path, required=True)
    export.add_argument("--out", type=Path, required=True)
    export.set_defaults(func=cmd_export)
    found = sub.add_parser("findings", help="the winners' patterns by problem size (Markdown), from stores and sweeps")
    found.add_argument("--store", type=Path, nargs="*", default=[])
    found.add_argument("--sweep", type=Path, nargs="*", default=[], help="python -m search.sweep files (.json, .gz)")
    found.add_argument("--out", type=Path, required=True)
    found.set_defaults(func=cmd_findings)
    return p


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
