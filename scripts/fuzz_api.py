#!/usr/bin/env python3
"""Fuzzes the public API (cudal2_ops.matmul for NN, cudal2_ops.linear with/without bias for NT) against the fp32
reference with the tolerances of docs/EVALUATION.md: random shapes (M, N, K in 1..20000, log-uniform, most capped
at 0.5 GFLOP, a few big), fp16/bf16, padded leading dimensions, misaligned storage offsets, transposed operands,
batched A, matmul's out=.

    python3 scripts/fuzz_api.py --cases 10000 --seed 0 --out fuzz.json
    python3 scripts/fuzz_api.py --seed 0 --only 1234          # rerun one failure
    python3 scripts/fuzz_api.py --seed 0 --only 1234 --explain  # ... with its path and worst element
    python3 scripts/fuzz_api.py --impl fp32 --cases 2000      # fp32 computed, rounded once: must pass (self-check)
    python3 scripts/fuzz_api.py --impl torch --cases 2000     # torch.matmul / F.linear with torch's defaults

Writes counts, elapsed time, the environment and every failure's repro to --out; exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cudal2_testing.correctness.fuzz import explain_case, fp32_api, make_case, make_cases, run_fuzz  # noqa: E402


def environment(device: torch.device, impl: str) -> dict:
    """What ran the fuzz: GPU, torch, CUDA, whether the compiled extension was loaded."""
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": str(device), "impl": impl}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sm=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count)
    if impl == "cudal2":
        import cudal2_ops  # noqa: PLC0415
        env["extension_available"] = bool(cudal2_ops.is_available())
    return env


def api(impl: str):
    """(matmul, linear) of the implementation under test."""
    if impl == "torch":
        return torch.matmul, F.linear
    if impl == "fp32":
        return fp32_api()
    import cudal2_ops  # noqa: PLC0415
    return cudal2_ops.matmul, cudal2_ops.linear


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 scripts/fuzz_api.py",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000, help="number of cases (0 .. cases-1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, action="append", help="run only this case index (repeatable)")
    parser.add_argument("--impl", choices=("cudal2", "fp32", "torch"), default="cudal2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--time-limit", type=float, help="stop after this many seconds (the report says how many ran)")
    parser.add_argument("--out", type=Path, help="results JSON")
    parser.add_argument("--explain", action="store_true",
                        help="print each failing case's dispatch path, bitwise equality with the baseline and worst "
                             "element")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cases = [make_case(args.seed, i) for i in args.only] if args.only else make_cases(args.seed, args.cases)
    matmul, linear = api(args.impl)
    doc = run_fuzz(args.seed, cases, matmul, linear, device, args.impl, environment(device, args.impl),
                   args.time_limit)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"fuzz {args.impl}: {doc['cases']} of {doc['cases_requested']} cases, {doc['failures']} failures, "
          f"{doc['elapsed_s']:.1f} s (seed {args.seed})")
    for failure in doc["failed_cases"][:20]:
        print(f"FAIL case {failure['index']} {failure['layout']} {failure['dtype']} M={failure['m']} N={failure['n']} "
              f"K={failure['k']}: {failure['error']}\n  repro: {failure['repro']}")
        if args.explain:
            print(f"  {json.dumps(explain_case(make_case(args.seed, failure['index']), matmul, linear, device))}")
    return 1 if doc["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
