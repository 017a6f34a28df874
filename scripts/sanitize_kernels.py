#!/usr/bin/env python3
"""Runs a sample of a kernel library's kernels under compute-sanitizer (memcheck; racecheck for chosen families).

Each (kernel, tool) runs in its own subprocess: compute-sanitizer re-invokes this script with --target, which runs
the kernel on a few shapes with residues (exact-size allocations: the torch caching allocator is disabled, so an
access past a tensor is outside any allocation), each at the default knobs and at the family's largest split count
(the other reduction path: for tiny the grid-wide split, a cooperative launch through the workspace), and also checks
the results against a CPU float64 reference.

    python3 scripts/sanitize_kernels.py --lib cudal2_ops/libcudal2_kernels.so --sample 20 --out sanitize.json
    python3 scripts/sanitize_kernels.py --lib LIB --kernel NAME --racecheck-families sm80_cute,decode
    python3 scripts/sanitize_kernels.py --lib LIB --families tiny --racecheck-families tiny   # one family, both tools
    python3 scripts/sanitize_kernels.py --lib LIB --withheld-in kernels/sm90/GPU.json   # what the table's gate withheld

Reports per kernel its code digest (build_tools.kernel_lib.code_digest: a record is stale once the kernel's source or
headers change) and per tool: clean, errors (sanitizer errors), wrong (results off), untested (no shape supported)
unsupported_device (the sanitizer refuses the GPU, e.g. in a sandboxed runtime) or failed (crash, timeout); exits 1
unless every run is clean or untested.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCHEMA = "cudal2.sanitize/1"
# (M, N, K): tile-aligned, residues in every dimension, a decode-like M=1, a long K.
DEFAULT_SHAPES = ((128, 128, 64), (129, 136, 72), (1000, 264, 520), (1, 4104, 128), (67, 8, 4104))
SANITIZER_ERROR_EXIT = 86
TARGET_WRONG_EXIT = 2
TARGET_UNTESTED_EXIT = 3
RESULT_MARKER = "CUDAL2_SANITIZE_TARGET "
OK_STATUSES = ("clean", "untested")


def sample_kernels(names: list[str], sample: int | None, seed: int) -> list[str]:
    """`sample` names drawn reproducibly from `names` (all of them, sorted, when sample is None or too large)."""
    names = sorted(names)
    if sample is None or sample >= len(names):
        return names
    return sorted(random.Random(seed).sample(names, sample))


def parse_shapes(text: str) -> tuple[tuple[int, int, int], ...]:
    """"128x128x64,1x4104x128" -> ((128, 128, 64), (1, 4104, 128))."""
    shapes = []
    for item in text.split(","):
        dims = tuple(int(x) for x in item.lower().split("x"))
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"bad shape {item!r}: expected MxNxK with positive sizes")
        shapes.append(dims)
    return tuple(shapes)


def sanitizer_command(sanitizer: str, tool: str, lib: str, kernel: str, shapes: str) -> list[str]:
    """compute-sanitizer running this script as the target on one kernel."""
    extra = ["--racecheck-report", "all"] if tool == "racecheck" else []
    return [sanitizer, "--tool", tool, *extra, "--error-exitcode", str(SANITIZER_ERROR_EXIT), "--print-limit", "20",
            sys.executable, str(Path(__file__).resolve()), "--target", "--lib", lib, "--kernel", kernel,
            "--shapes", shapes]


def classify(returncode: int | None, output: str) -> dict:
    """Turns a sanitizer run's exit code and output into a report entry."""
    found = re.search(r"ERROR SUMMARY:\s*(\d+)\s+error", output)
    errors = int(found.group(1)) if found else None
    races = re.search(r"RACECHECK SUMMARY:\s*\d+\s+hazards?\s+displayed\s+\((\d+)\s+errors?,\s*(\d+)\s+warnings?",
                      output)
    if races:
        errors = max(errors or 0, int(races.group(1)))
    target = None
    for line in output.splitlines():
        if line.startswith(RESULT_MARKER):
            target = json.loads(line[len(RESULT_MARKER):])
    if "Device not supported" in output:
        status = "unsupported_device"
    elif returncode is None:
        status = "failed"
    elif (errors or 0) > 0 or returncode == SANITIZER_ERROR_EXIT:
        status = "errors"
    elif returncode == TARGET_WRONG_EXIT:
        status = "wrong"
    elif returncode == TARGET_UNTESTED_EXIT:
        status = "untested"
    elif returncode == 0 and errors == 0 and target is not None:
        status = "clean"
    else:
        status = "failed"
    entry = {"status": status, "exit_code": returncode, "errors": errors, "shapes": target,
             "race_warnings": int(races.group(2)) if races else None}
    if status not in OK_STATUSES:
        entry["log_tail"] = output[-4000:]
    return entry


def run_one(sanitizer: str, tool: str, lib: str, kernel: str, shapes: str, timeout_s: float) -> dict:
    """One kernel under one sanitizer tool, in a subprocess."""
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONUNBUFFERED": "1"}
    cmd = sanitizer_command(sanitizer, tool, lib, kernel, shapes)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        entry = classify(proc.returncode, proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        entry = classify(None, out + f"\ntimed out after {timeout_s} s")
    entry["seconds"] = round(time.perf_counter() - start, 2)
    return entry


def target_splits(family: str) -> tuple[int, ...]:
    """The split counts a target runs: the default (0) and the family's largest (its KNOB_SPACE), if any."""
    from cudal2_catalog.families import family_module  # noqa: PLC0415

    largest = max(family_module(family).KNOB_SPACE.get("splits", (0,)))
    return (0, largest) if largest > 1 else (0,)


def target(lib: str, kernel_name: str, shapes: tuple[tuple[int, int, int], ...]) -> int:
    """Runs inside compute-sanitizer: the kernel on each shape it accepts, checked against a float64 reference."""
    import torch  # noqa: PLC0415 (only the target needs torch on the GPU)

    from cudal2_testing.correctness.inputs import random_inputs  # noqa: PLC0415
    from cudal2_testing.correctness.kernel_impl import KernelImpl  # noqa: PLC0415
    from cudal2_testing.correctness.reference import REL_TOL  # noqa: PLC0415
    from cudal2_testing.kernel_library import KernelLibrary  # noqa: PLC0415

    kernel = KernelLibrary(lib).kernels[kernel_name]
    report, wrong, ran = {}, False, 0
    impls = [(splits, KernelImpl(kernel, splits=splits)) for splits in target_splits(kernel.family)]
    for m, n, k in shapes:  # each shape's inputs and float64 reference serve every split count
        a, b, bias = random_inputs((m, n, k), kernel.layout, kernel.dtype, kernel.has_bias, 0, "cuda")
        ref = None
        for splits, impl in impls:
            out = torch.empty((m, n), dtype=kernel.dtype, device="cuda")
            key = f"{m}x{n}x{k}" + (f" splits={splits}" if splits else "")
            if not impl.can_implement(a, b, bias, out):
                report[key] = "unsupported"
                continue
            impl(a, b, bias, out)
            torch.cuda.synchronize()
            ran += 1
            if ref is None:
                bd = b.cpu().double() if kernel.layout == "nn" else b.cpu().double().t()
                ref = a.cpu().double() @ bd + (bias.cpu().double() if bias is not None else 0.0)
            rel = float((out.cpu().double() - ref).norm() / ref.norm().clamp_min(1e-30))
            ok = rel <= REL_TOL[kernel.dtype]
            wrong |= not ok
            report[key] = f"{'ok' if ok else 'WRONG'} rel_err={rel:.3g}"
    print(RESULT_MARKER + json.dumps(report), flush=True)
    return TARGET_WRONG_EXIT if wrong else (0 if ran else TARGET_UNTESTED_EXIT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 scripts/sanitize_kernels.py",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", required=True, help="kernel library (.so) to sanitize")
    parser.add_argument("--sample", type=int, help="number of kernels to sample (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernel", action="append", help="sanitize this kernel (repeatable; overrides --sample)")
    parser.add_argument("--withheld-in", type=Path, help="sanitize the kernels this table's sanitizer gate withheld "
                        "(its header's withheld_unsanitized; overrides --sample)")
    parser.add_argument("--families", default="", help="comma-separated families: sample only their kernels")
    parser.add_argument("--racecheck-families", default="", help="comma-separated families also run under racecheck")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in DEFAULT_SHAPES),
                        help="MxNxK,... problems to run each kernel on")
    parser.add_argument("--sanitizer", default=shutil.which("compute-sanitizer") or "compute-sanitizer")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sanitizer run")
    parser.add_argument("--jobs", type=int, default=1, help="sanitizer runs at a time (they share the GPU)")
    parser.add_argument("--out", type=Path, help="report JSON")
    parser.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shapes = parse_shapes(args.shapes)
    if args.target:
        return target(args.lib, args.kernel[0], shapes)

    from cudal2_testing.kernel_library import KernelLibrary  # noqa: PLC0415
    from search.sanitize_gate import current_code  # noqa: PLC0415

    library = KernelLibrary(args.lib)
    runnable = library.runnable_on()
    families = {f for f in args.families.split(",") if f}
    pool = [name for name in runnable if not families or library.kernels[name].family in families]
    withheld = (json.loads(args.withheld_in.read_text())["header"].get("withheld_unsanitized", [])
                if args.withheld_in else [])
    names = args.kernel or [n for n in withheld if n in runnable] or sample_kernels(pool, args.sample, args.seed)
    race_families = {f for f in args.racecheck_families.split(",") if f}
    start = time.perf_counter()
    runs = [(name, tool) for name in names
            for tool in ["memcheck"] + (["racecheck"] if library.kernels[name].family in race_families else [])]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        entries = pool.map(lambda run: run_one(args.sanitizer, run[1], args.lib, run[0], args.shapes, args.timeout),
                           runs)
        kernels = {name: {"family": library.kernels[name].family, "code": current_code(name)} for name in names}
        for (name, tool), entry in zip(runs, entries):
            kernels[name][tool] = entry
            print(f"{name}: {tool} {entry['status']}", flush=True)
    bad = sorted(name for name, entry in kernels.items()
                 if any(isinstance(v, dict) and v["status"] not in OK_STATUSES for v in entry.values()))
    doc = {"schema": SCHEMA, "lib": args.lib, "seed": args.seed, "sample": args.sample, "shapes": args.shapes,
           "runnable": len(runnable), "checked": len(names), "failed": bad,
           "elapsed_s": round(time.perf_counter() - start, 2), "kernels": kernels}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"sanitized {len(names)} of {len(runnable)} runnable kernels: {len(bad)} with problems {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
