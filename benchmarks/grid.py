"""`python -m benchmarks.grid`: times cudal2 against every baseline over a shape set (docs/EVALUATION.md) and
writes `benchmarks/results/<gpu_slug>/<run>.json` (flushed as it goes; `--resume` skips rows already there).

Ours and torch run once per `--layouts` entry; the fixed-layout baselines (cublas-nn/-tn, cublaslt-*-nn/-tn) run
once per shape and serve both layouts, so every layout gets its -max aggregate.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks import check, impls, results, runner
from cudal2_ops.tables import entry_key
from cudal2_testing.measure import env, shapes

RESULTS_DIR = Path(__file__).resolve().parent / "results"
FLUSH_S = 15.0


def _csv(choices: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return items
    return parse


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grid", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", choices=("g1000", "llm", "odd"), default="g1000")
    p.add_argument("--sample", type=int, default=None, help="stratified sample of this many shapes")
    p.add_argument("--seed", type=int, default=0, help="sampling, input and shuffling seed")
    p.add_argument("--below-mnk-log2", type=int, default=None, metavar="B",
                   help="only shapes with M*N*K < 2^B (after sampling), e.g. 30 for the small-problem targets")
    p.add_argument("--problems-from", type=Path, default=None, metavar="FILE",
                   help="only shapes of which FILE lists a table key (layout_dtype_M_N_K, one per line, e.g. "
                        "python -m studies.table_drift --losses-out) for one of --layouts and --dtypes; a listed "
                        "shape is timed in every requested layout and dtype")
    p.add_argument("--layouts", type=_csv(("nt", "nn")), default=["nt", "nn"])
    p.add_argument("--dtypes", type=_csv(tuple(runner.DTYPES)), default=["fp16"])
    p.add_argument("--modes", type=_csv(runner.MODES), default=["kernel", "offline"])
    p.add_argument("--l2", choices=("warm", "cold"), default="warm")
    p.add_argument("--impls", type=_csv(impls.ALL), default=list(impls.DEFAULT))
    p.add_argument("--qps", type=float, default=100.0, help="server mode: mean request rate of the idle gaps")
    p.add_argument("--server-iters", type=int, default=20)
    p.add_argument("--offline-budget-ms", type=float, default=30.0, help="offline host time per impl and shape")
    p.add_argument("--target-ms", type=float, default=1.0, help="kernel mode: duration of one graph replay")
    p.add_argument("--out", type=Path, default=None, help="default benchmarks/results/<gpu_slug>/<run>.json")
    p.add_argument("--resume", action="store_true", help="continue --out, skipping rows it already has")
    return p.parse_args(argv)


def run_name(args: argparse.Namespace) -> str:
    """Default results file stem, e.g. g1000_nt-nn_fp16_kernel-offline_warm."""
    return "_".join([shape_label(args), "-".join(args.layouts), "-".join(args.dtypes),
                     "-".join(args.modes), args.l2])


def shape_label(args: argparse.Namespace) -> str:
    """The shape set as the summary names it, e.g. "g1000", "g1000-sample100", "g1000-below2pow30",
    "llm-listed" (--problems-from)."""
    label = shapes.set_label(args.shapes, args.sample)
    label = label if args.below_mnk_log2 is None else f"{label}-below2pow{args.below_mnk_log2}"
    return label if args.problems_from is None else f"{label}-listed"


def select_shapes(args: argparse.Namespace) -> list[shapes.Shape]:
    """The shapes to run: the set, sampled, then limited to M*N*K < 2^B when --below-mnk-log2 B is given and to
    those with a table key in --problems-from for a requested layout and dtype."""
    shape_list = shapes.load(args.shapes, args.sample, args.seed)
    if args.below_mnk_log2 is not None:
        shape_list = [(m, n, k) for m, n, k in shape_list if m * n * k < 2 ** args.below_mnk_log2]
    if args.problems_from is None:
        return shape_list
    listed = set(args.problems_from.read_text().split())
    return [(m, n, k) for m, n, k in shape_list
            if any(entry_key(layout, dtype, m, n, k) in listed for layout in args.layouts for dtype in args.dtypes)]


def todo_for(shape: shapes.Shape, dtype: str, impl_list: list[impls.Impl], modes: list[str],
             done: set[tuple]) -> set[tuple[str, str, str]]:
    """(impl, layout, mode) triples of one shape and dtype that have no row yet."""
    m, n, k = shape
    return {(i.name, i.layout, mode) for i in impl_list for mode in modes
            if (m, n, k, dtype, i.name, i.layout, mode) not in done}


def open_document(args: argparse.Namespace, argv: list[str], out: Path, impl_names: list[str],
                  unavailable: dict[str, str], settings: runner.Settings, n_shapes: int) -> dict:
    """The results document to fill: the existing one on --resume, else a new one with a measured roofline."""
    head = env.header(argv)
    unmet = results.table_request_unmet(head, os.environ.get("CUDAL2_TABLE"))
    if unmet:
        raise SystemExit(f"benchmarks.grid: {unmet}; nothing measured")
    if args.resume and out.exists():
        doc = results.load(out)
        conflicts = results.resume_conflicts(doc["header"], head)
        if conflicts:
            raise SystemExit(f"{out} was measured in another setting, so it cannot be continued (--out for a new "
                             "file): " + "; ".join(conflicts))
        doc["header"].setdefault("sessions", []).append({"date": head["date"], "command": head["command"],
                                                         "commit": head["commit"]})
        return doc
    head["roofline"] = env.measure_roofline()
    head["wall_s"] = 0.0
    protocol = {"shapes": shape_label(args), "shape_set": args.shapes, "n_shapes": n_shapes,
                "sample": args.sample, "below_mnk_log2": args.below_mnk_log2,
                "problems_from": args.problems_from and args.problems_from.name, "seed": args.seed, "layouts": args.layouts, "dtypes": args.dtypes,
                "modes": args.modes, "l2": args.l2, "impls": impl_names, "unavailable": unavailable,
                "tolerance": check.TOLERANCE, "settings": vars(settings) | {"modes": list(settings.modes)},
                "reference": "cudal2_testing.correctness.reference (fp32, no TF32, no reduced-precision reductions)",
                "kernel": "CUDA graph of R calls (R sized per implementation), the shape's implementations' graphs "
                          f"timed in {runner.INTERLEAVED_ROUNDS} rotated rounds of 5 replays (CUDA events), median "
                          "per call",
                "offline": "perf_counter around one call, synchronize before/after, fresh inputs, shuffled order",
                "server": "offline + exponential idle gap (mean 1/qps) before each call"}
    return results.new_document(head, protocol)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.grid needs a CUDA GPU", file=sys.stderr)
        return 2
    from tqdm import tqdm

    shape_list = select_shapes(args)
    impl_list, unavailable = impls.build(args.impls, args.layouts)
    for name, why in unavailable.items():
        print(f"skipping {name}: {why}", file=sys.stderr)
    settings = runner.Settings(modes=tuple(args.modes), l2=args.l2, seed=args.seed, target_ms=args.target_ms,
                               offline_budget_ms=args.offline_budget_ms, server_iters=args.server_iters, qps=args.qps)
    slug = env.gpu_slug(torch.cuda.get_device_name())
    out = args.out or RESULTS_DIR / slug / f"{run_name(args)}.json"
    if out.exists() and not args.resume:
        print(f"{out} exists: pass --resume to continue it or --out for a new file", file=sys.stderr)
        return 2
    doc = open_document(args, argv, out, sorted({i.name for i in impl_list}), unavailable, settings,
                        len(shape_list))
    done = {results.row_key(r) for r in doc["rows"]}
    l2_bytes = doc["header"]["l2_bytes"]
    if args.l2 == "cold" and not l2_bytes:
        print("--l2 cold needs the L2 size, which torch does not report here", file=sys.stderr)
        return 2
    start = last_flush = time.perf_counter()
    wall0 = doc["header"].get("wall_s", 0.0)
    jobs = [(dtype, shape) for dtype in args.dtypes for shape in shape_list]
    try:
        for dtype, shape in tqdm(jobs, desc=out.stem, unit="shape", dynamic_ncols=True):
            todo = todo_for(shape, dtype, impl_list, args.modes, done)
            if not todo:
                continue
            new_rows = runner.measure(shape, dtype, impl_list, todo, settings, l2_bytes)
            doc["rows"] += new_rows
            done |= {results.row_key(r) for r in new_rows}
            if runner.touched_bytes(shape) > 2**30:
                torch.cuda.empty_cache()
            if time.perf_counter() - last_flush > FLUSH_S:
                doc["header"]["wall_s"] = wall0 + time.perf_counter() - start
                results.save(out, doc)
                last_flush = time.perf_counter()
    finally:
        doc["header"]["wall_s"] = wall0 + time.perf_counter() - start
        doc["header"]["nvidia_smi_end"] = env.nvidia_smi(torch.cuda.current_device())
        results.save(out, doc)
    failures = sum(not r["ok"] for r in doc["rows"])
    print(f"wrote {out}: {len(doc['rows'])} rows, {failures} failures, {doc['header']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
