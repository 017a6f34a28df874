"""`python -m search`: run, resume, report, emit and export the kernel search (see search/README.md).

    python -m search run --arch sm90 --dtype fp16 --layout nt --shapes sample100 --budget-evals 2000 --store s.db
    python -m search resume --store s.db
    python -m search report --store s.db --out report/
    python -m search emit --store s.db [--kernel-budget 48]
    python -m search export --store s.db --out rl.jsonl
    python -m search prebuild --store s.db --artifacts build/search

A mistake in the input (an argument, a file, a store) is one line on stderr and exit status 2; any other failure is
one line and exit status 1. `--debug` (or CUDAL2_DEBUG=1) shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from search.backend import Backend
from search.candidate import Problem
from cudal2_catalog.config import DTYPES, LAYOUTS
from search import ray_cluster
from search.cli_args import SHAPES_HELP, arch, existing_file, integer, load_shapes, number, text_of
from search.errors import UserError
from search.fault_injection import checkpoint
from search.loop import POLICIES, RunArgs, Search, initial_policy, llm_proposer
from search.proposers import VETO_BELOW
from search.store import Store, read_store
from search.table_select import DEFAULT_KERNEL_BUDGET, DEFAULT_MARGIN

BACKENDS = ("sim", "local", "ray")
# New builds a run may compile by default: an sm90 kernel takes 60-90 s of nvcc; the simulator's are free.
DEFAULT_MAX_BUILDS = {"sim": None, "local": 32, "ray": 32}
LLMS = ("none", "openai")
WAVE_HELP = ("problems proposed and evaluated together within a round (default: the whole round); a smaller "
             "wave lets a round over many problems learn from its first problems' verdicts")
WINS_HELP = ("search stores (another GPU's, say) whose problems with a kernel under the bar the run visits first in "
             "each round, best speedup first, then the rest smallest first (search/problem_order.py)")
DEBUG_ENV = "CUDAL2_DEBUG"


class UsageError(UserError):
    """An argument argparse refused (its message already names the command)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: a refused argument raises UsageError (main prints it, exit status 2)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def make_backend(args: RunArgs, ray_options: dict | None = None) -> Backend:
    """The backend a run names (local and ray come from search.backends; ray is an optional extra, `ray_options`
    from search.ray_cluster.options)."""
    if args.backend == "sim":
        from search.simulate import SimulatedBackend
        return SimulatedBackend(seed=args.seed, eval_delay_s=args.sim_delay_ms / 1000, arch=args.arch)
    if args.backend == "local":
        from search.backends.local import LocalBackend
        return LocalBackend(artifacts=Path(args.artifacts), arch=args.arch, compile_only=args.compile_only)
    if args.backend == "ray":
        return ray_cluster.backend_for_run(args, **(ray_options or {}))
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
    """Starts a run; every input is checked (the --warm-start files read) before the store file is touched."""
    args = RunArgs(policy=ns.policy, llm=ns.llm, per_round=ns.per_round, wave=ns.wave, explore=ns.explore,
                   veto_below=ns.veto_below,
                   budget_evals=ns.budget_evals, budget_minutes=ns.budget_minutes, seed=ns.seed,
                   compile_only=ns.compile_only, memory=ns.memory, arch=ns.arch, backend=ns.backend,
                   artifacts=str(ns.artifacts or ""), sim_delay_ms=ns.sim_delay_ms,
                   max_builds=ns.max_builds if ns.max_builds is not None else DEFAULT_MAX_BUILDS[ns.backend],
                   warm_start=[str(p) for p in ns.warm_start], llm_prior=ns.llm_prior, llm_group=ns.llm_group,
                   wins_first_from=[str(p) for p in ns.wins_first_from])
    check_backend(args, ns)
    ray_options = ray_cluster.options(ns, args.backend)
    if args.llm != "none":
        llm_proposer(args.llm)  # the endpoint's variables, checked now
    if args.memory and Path(args.memory).exists():
        text_of(Path(args.memory), "--memory")
    problems = [Problem(ns.layout, ns.dtype, *s) for s in load_shapes(ns.shapes, ns.seed, ns.max_log2_mnk)]
    policy = initial_policy(args)  # reads the --warm-start files
    check_progress_bar(ns.quiet)
    if ns.store is None:
        ns.store = Path("search.db").resolve()
        print(f"no --store given: this run's store is {ns.store} (resume, report and emit take --store {ns.store})")
    backend = make_backend(args, ray_options)
    try:
        store = Store(ns.store)
        try:
            checkpoint("started")
            search = Search.start(store, backend, args, problems, policy=policy)
            if args.compile_only:
                search.run()
                print(f"run {search.run_id}: compiled {len(store.query('SELECT * FROM compiles'))} builds into "
                      f"{args.artifacts}; evaluate with: python -m search resume --store {ns.store} --backend local "
                      f"--artifacts {args.artifacts}")
            else:
                drive(search, ns.quiet)
        finally:
            store.close()
    finally:
        backend.close()
    return 0


def check_progress_bar(quiet: bool) -> None:
    """Refuses a progress bar where tqdm is not installed."""
    if not quiet and importlib.util.find_spec("tqdm") is None:
        raise UserError("the progress bar needs tqdm (pip install tqdm, or scripts/install.sh); or pass --quiet")


def check_backend(args: RunArgs, ns: argparse.Namespace) -> None:
    """Refuses a backend the run's settings cannot use (no artifacts folder, an arch the simulator lacks)."""
    if args.backend != "sim" and not args.artifacts and not ns.sim_workers:
        raise UserError(f"--backend {args.backend} needs --artifacts DIR (where builds are kept)")
    if args.backend == "sim":
        from search.simulate import SIM_GPUS
        if args.arch not in SIM_GPUS:
            raise UserError(f"--backend sim simulates {' and '.join(f'sm{a}' for a in sorted(SIM_GPUS))}, not "
                            f"sm{args.arch}")


def nothing_to_resume(store: Store) -> str:
    """Why a store has no run to resume, and what to do."""
    runs = store.runs()
    if not runs:
        return (f"{store.path} holds no run: the run that created it stopped before recording one; start it again "
                f"with python -m search run --store {store.path}")
    return (f"every run in {store.path} has finished ({len(runs)}, the latest {runs[-1]['id']}); extend one with "
            "--run ID and a larger --budget-evals or --budget-minutes")


def cmd_resume(ns: argparse.Namespace) -> int:
    """Continues a run: the store is read (read-only) first, then opened as its one writer."""
    reader = Store(ns.store, readonly=True)
    try:
        run_id = ns.run or reader.unfinished_run()
        if run_id is None:
            raise UserError(nothing_to_resume(reader))
        stored = json.loads(reader.run(run_id)["args"])
    finally:
        reader.close()
    overrides = {k: v for k, v in (("backend", ns.backend), ("artifacts", ns.artifacts and str(ns.artifacts)),
                                   ("budget_evals", ns.budget_evals), ("budget_minutes", ns.budget_minutes),
                                   ("max_builds", ns.max_builds), ("wave", ns.wave),
                                   ("wins_first_from", ns.wins_first_from and [str(p) for p in ns.wins_first_from]))
                 if v is not None}
    args = RunArgs(**{**stored, **overrides, "compile_only": False})
    check_backend(args, ns)
    backend = make_backend(args, ray_cluster.options(ns, args.backend))
    try:
        store = Store(ns.store)
        try:
            check_progress_bar(ns.quiet)
            drive(Search.resume(store, backend, run_id, overrides), ns.quiet)
        finally:
            store.close()
    finally:
        backend.close()
    return 0


def open_runs(path: Path, what: str) -> Store:
    """The store at `path`, read-only; UserError when it holds no run (nothing to `what`)."""
    store = Store(path, readonly=True)
    if not store.runs():
        store.close()
        raise UserError(f"{path} holds no run: nothing to {what}")
    return store


def check_folder(path: Path, flag: str) -> None:
    """Refuses an output folder argument that names an existing file."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path} is a file; give a folder")


def cmd_report(ns: argparse.Namespace) -> int:
    """Writes the Markdown report and plots of a store (or of its gzip copy)."""
    from search.run_report import write_report
    check_folder(ns.out, "--out")
    with read_store(ns.store) as store:  # a store, or its gzip copy as results folders keep them
        if not store.runs():
            raise UserError(f"{ns.store} holds no run: nothing to report")
        print(write_report(store, ns.out, ns.store))
    return 0


def cmd_emit(ns: argparse.Namespace) -> int:
    """Writes the table and kernel sources of the store's winners."""
    from search.emit import emit
    check_folder(ns.root, "--root")
    store = open_runs(ns.store, "emit")
    try:
        where, params = ("AND run_id = ?", (store.run(ns.run)["id"],)) if ns.run else ("", ())
        ok = store.query(f"SELECT COUNT(*) FROM evaluations WHERE status = 'ok' {where}", params)[0][0]
        if not ok:
            scope = f"run {ns.run} of {ns.store}" if ns.run else str(ns.store)
            raise UserError(f"{scope} has no correct measured candidate to emit a table from")
        checkpoint("emit")
        for path in emit(store, ns.root, ns.kernel_budget, ns.margin, ns.run):
            print(path)
    finally:
        store.close()
    return 0


def cmd_export(ns: argparse.Namespace) -> int:
    """Writes the store's LLM completions grouped per prompt with their rewards (search/README.md, "Export")."""
    from search.export import export
    if ns.out.is_dir():
        raise UserError(f"--out {ns.out} is a folder; give a file name")
    store = open_runs(ns.store, "export")
    try:
        count = export(store, ns.out)
    finally:
        store.close()
    print(f"{ns.out}: {count} completions (grouped per prompt; `python -m search.export_convert` writes TRL datasets)")
    return 0


def cmd_prebuild(ns: argparse.Namespace) -> int:
    """Builds, on this machine (no GPU needed), the builds the stores' runs compiled that `--artifacts` lacks, so a run
    resumed on a bare GPU machine with that folder (or the object cache, build/kernel_cache) carried over does not
    wait for nvcc. Exit status 1 when a build that compiled before fails here."""
    from search.backends.local import LocalBackend
    check_folder(ns.artifacts, "--artifacts")
    candidates = {}
    for path in ns.store:
        with read_store(path) as store:
            candidates.update((c.build_key, c) for c in store.compiled_candidates())
    backend = LocalBackend(ns.artifacts, arch=ns.arch, compile_only=True, jobs=ns.jobs)
    began = time.monotonic()
    outcomes = backend.build_missing(list(candidates.values()))
    failed = sorted(key for key, outcome in outcomes.items() if not outcome.ok)
    print(f"{ns.artifacts}: {len(candidates)} builds the stores compiled, {len(outcomes)} built now in "
          f"{time.monotonic() - began:.0f} s, {len(candidates) - len(outcomes)} there already"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m search` (argument values are checked by search.cli_args)."""
    debug = Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", help=f"show tracebacks (also {DEBUG_ENV}=1)")
    p = Parser(prog="python -m search", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               parents=[debug])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start a search run", parents=[debug])
    run.add_argument("--arch", type=arch, default=90, help="target GPU architecture, e.g. sm90")
    run.add_argument("--dtype", choices=DTYPES, default="fp16")
    run.add_argument("--layout", choices=LAYOUTS, default="nt")
    run.add_argument("--shapes", default="sample100", help=SHAPES_HELP)
    run.add_argument("--max-log2-mnk", type=number(1, 100), default=None,
                     help="only the shapes with log2(M*N*K) below this (e.g. 32: the latency-bound sizes)")
    run.add_argument("--budget-minutes", type=number(0, low_open=True), default=None,
                     help="minutes of the run's own time (summed over resumes)")
    run.add_argument("--budget-evals", type=integer(1), default=None, help="evaluations in all")
    run.add_argument("--policy", choices=POLICIES, default="rl")
    run.add_argument("--llm", choices=LLMS, default="none",
                     help="none (default) | openai (an OpenAI-compatible endpoint: CUDAL2_LLM_BASE_URL, "
                          "CUDAL2_LLM_MODEL, CUDAL2_LLM_API_KEY)")
    run.add_argument("--llm-prior", type=number(0, 100), default=1.0,
                     help="with --llm: the policy's imitation step toward each measured LLM configuration (0: the LLM "
                          "only proposes; default 1)")
    run.add_argument("--llm-group", type=integer(1, 16), default=1,
                     help="with --llm: completions sampled per prompt (groups for group-relative RL export)")
    run.add_argument("--backend", choices=BACKENDS, default="sim")
    run.add_argument("--store", type=Path, default=None, help="SQLite store (default: search.db in this folder)")
    run.add_argument("--compile-only", action="store_true",
                     help="propose one round and compile it into --artifacts, no GPU; evaluate later with resume")
    run.add_argument("--artifacts", type=Path, default=None, help="folder of compiled builds (local/ray backends)")
    run.add_argument("--max-builds", type=integer(0), default=None,
                     help="new builds the run may compile (default: 32 for local/ray, unlimited for sim); past it, "
                          "only built kernels (the extension's defaults included) are proposed")
    run.add_argument("--per-round", type=integer(1, 1000), default=4, help="proposals per problem per round")
    run.add_argument("--wave", type=integer(1), default=None, metavar="PROBLEMS", help=WAVE_HELP)
    run.add_argument("--warm-start", type=existing_file, nargs="+", default=[], metavar="FILE",
                     help="earlier measurements the rl policy is fit to before the run proposes anything: "
                          "python -m search.sweep files (.json, .json.gz) and search stores (.sqlite, .db), of this "
                          "GPU or another (search/warm_start.py)")
    run.add_argument("--wins-first-from", type=existing_file, nargs="+", default=[], metavar="STORE", help=WINS_HELP)
    run.add_argument("--explore", type=number(0, 1), default=0.0,
                     help="share of random proposals next to the policy (rl), 0 to 1")
    run.add_argument("--veto-below", type=number(0, 10), default=VETO_BELOW, metavar="SPEEDUP",
                     help="rl: a kernel the run measured on a problem and its nearest neighbours, never at this "
                          "share of the bar, is proposed there only when nothing else is left (0: no veto)")
    run.add_argument("--memory", default="", help="contextual-memory file for LLM prompts (updated every round)")
    run.add_argument("--seed", type=integer(0), default=0)
    run.add_argument("--sim-delay-ms", type=number(0, 3_600_000), default=0.0,
                     help="simulated backend: sleep per evaluation")
    ray_cluster.add_arguments(run)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    resume = sub.add_parser("resume", help="continue the store's unfinished run", parents=[debug])
    resume.add_argument("--store", type=Path, required=True)
    resume.add_argument("--run", default=None, help="run id (default: the latest unfinished run)")
    resume.add_argument("--backend", choices=BACKENDS, default=None, help="override the run's backend")
    resume.add_argument("--artifacts", type=Path, default=None)
    resume.add_argument("--budget-evals", type=integer(1), default=None, help="override the run's evaluation budget")
    resume.add_argument("--budget-minutes", type=number(0, low_open=True), default=None)
    resume.add_argument("--max-builds", type=integer(0), default=None, help="override the run's build budget")
    resume.add_argument("--wave", type=integer(1), default=None, metavar="PROBLEMS",
                        help="override the run's wave (the problems of a round it has not proposed yet and the rounds "
                             "after)")
    resume.add_argument("--wins-first-from", type=existing_file, nargs="+", default=None, metavar="STORE",
                        help="override the run's: " + WINS_HELP)
    resume.add_argument("--quiet", action="store_true")
    ray_cluster.add_arguments(resume)
    resume.set_defaults(func=cmd_resume)
    report = sub.add_parser("report", help="Markdown + plots of a store", parents=[debug])
    report.add_argument("--store", type=Path, required=True)
    report.add_argument("--out", type=Path, required=True)
    report.set_defaults(func=cmd_report)
    emit = sub.add_parser("emit", help="write the table and kernel sources of the store's winners", parents=[debug])
    emit.add_argument("--store", type=Path, required=True)
    emit.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent / "kernels")
    emit.add_argument("--kernel-budget", type=integer(1), default=DEFAULT_KERNEL_BUDGET,
                      help="most distinct kernels per (arch, layout, dtype)")
    emit.add_argument("--margin", type=number(0, 1), default=DEFAULT_MARGIN,
                      help="share of the cuBLASLt time a kernel must save to take an entry (0 to 1)")
    emit.add_argument("--run", default=None, help="only this run's evaluations (default: all runs of the store)")
    emit.set_defaults(func=cmd_emit)
    export = sub.add_parser("export", help="LLM completions grouped per prompt with their rewards, for group-relative RL fine-tuning", parents=[debug])
    export.add_argument("--store", type=Path, required=True)
    export.add_argument("--out", type=Path, required=True)
    export.set_defaults(func=cmd_export)
    prebuild = sub.add_parser("prebuild", parents=[debug],
                              help="build the stores' earlier builds ahead, on a CPU machine, for a resume elsewhere")
    prebuild.add_argument("--store", type=existing_file, nargs="+", required=True, help="stores (or their gzip copies)")
    prebuild.add_argument("--artifacts", type=Path, required=True, help="folder of compiled builds to fill")
    prebuild.add_argument("--arch", type=arch, default=90, help="target GPU architecture, e.g. sm90")
    prebuild.add_argument("--jobs", type=integer(1), default=None, help="parallel nvcc processes (default: CPU count)")
    prebuild.set_defaults(func=cmd_prebuild)
    return p


def one_line(text: object) -> str:
    """`text` with its whitespace (newlines included) collapsed to single spaces."""
    return " ".join(str(text).split())


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns the exit status (2: a mistake in the input, 1: any other failure), printing a
    failure as one line on stderr (the traceback with --debug or CUDAL2_DEBUG=1)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    command, ns = "python -m search", None
    try:
        ns = parser().parse_args(argv)
        command = f"python -m search {ns.command}"
        return ns.func(ns)
    except UsageError as exc:
        print(one_line(exc), file=sys.stderr)
        return 2
    except UserError as exc:
        if debug:
            raise
        print(f"{command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        if not isinstance(exc.code, str) or debug:
            raise
        print(f"{command}: error: {one_line(exc.code)}", file=sys.stderr)  # a refusal raised as SystemExit(text)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (a bug or an environment failure: one line unless --debug)
        if debug:
            raise
        store = f" (store {ns.store})" if isinstance(exc, sqlite3.Error) and hasattr(ns, "store") else ""
        print(f"{command}: failed{store}: {type(exc).__name__}: {one_line(exc)} (--debug shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
