"""Where one e2e step's time goes, unpatched vs patched: CUDA kernels per step and host-side ops, from torch.profiler.

    python -m benchmarks.e2e_trace --out OUT [--scenarios fp16:decode:1:compile,fp16:prefill:1:compile] [--steps 5]

For each scenario (dtype:phase:batch:mode, modes eager / compile), builds the e2e benchmark's model and inputs
(benchmarks/e2e.py: same model, sequence lengths and patching), warms both variants up, then profiles `--steps` steps
of each (CPU and CUDA activities) and reports per step: CUDA kernels launched, their total GPU time, the kernels and
host ops that differ most between the variants. It explains an e2e speedup below 1 (extra kernels around the custom
op, slower kernels, or host overhead). Writes OUT/e2e_trace.json and OUT/e2e_trace.md.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.autograd import DeviceType

from benchmarks import e2e
from benchmarks.llama_block import LlamaConfig
from cudal2_testing.measure import env

TOP = 12


def _gpu_us(event) -> float:
    """Self GPU time of a profiler event average (the attribute was renamed across torch versions)."""
    return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))


def profile_steps(step, steps: int) -> dict:
    """Profiles `steps` calls of `step`: per-step kernel count and GPU time, kernels and host ops by name."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels, kernel_us, host_us = Counter(), Counter(), Counter()
    for ev in prof.key_averages():
        if ev.device_type == DeviceType.CUDA:
            kernels[ev.key] += ev.count / steps
            kernel_us[ev.key] += _gpu_us(ev) / steps
        elif ev.device_type == DeviceType.CPU:
            host_us[ev.key] += ev.self_cpu_time_total / steps
    return {"kernels_per_step": sum(kernels.values()), "kernel_us_per_step": sum(kernel_us.values()),
            "host_self_us_per_step": sum(host_us.values()),
            "kernels": {k: {"count": kernels[k], "us": kernel_us[k]} for k in kernels},
            "host_ops": {k: us for k, us in host_us.items()}}


def differences(unpatched: dict, patched: dict, key: str, value) -> list[tuple[str, float, float]]:
    """(name, unpatched, patched) of `key` entries, largest absolute difference first."""
    names = set(unpatched[key]) | set(patched[key])
    rows = [(n, value(unpatched[key].get(n)), value(patched[key].get(n))) for n in names]
    return sorted(rows, key=lambda r: -abs(r[2] - r[1]))[:TOP]


def trace_scenario(bench: e2e.Bench, sc: e2e.Scenario, steps: int) -> dict:
    """Both variants of one scenario, warmed up (compiled where the mode says so), then profiled."""
    model = bench.model(sc.dtype)
    if sc.mode.startswith("compile"):
        torch._dynamo.reset()
    work = e2e.Workload(model, sc, bench.args.seed)
    out = {}
    for patched, name in ((False, "unpatched"), (True, "patched")):
        run = bench.runner(sc, work, model, patched)
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        out[name] = profile_steps(run, steps)
    e2e.unpatch_linear(model)
    return out


def markdown(doc: dict) -> str:
    envd = doc["environment"]
    lines = ["# e2e step trace: unpatched vs patched (torch.profiler)", "",
             f"- GPU: {envd.get('gpu')}, torch {envd.get('torch')}, commit {envd.get('commit')}, "
             f"date {envd.get('date')}",
             f"- command: `{envd.get('command')}`; {doc['steps']} profiled steps per variant after 3 warm-up steps",
             "- per step: CUDA kernels launched, their summed GPU time, and the host ops' summed self CPU time", ""]
    for sc in doc["scenarios"]:
        u, p = sc["unpatched"], sc["patched"]
        lines += [f"## {sc['name']}", "",
                  "| variant | kernels/step | kernel GPU us/step | host self us/step |", "|---|---|---|---|"]
        for name, v in (("unpatched", u), ("patched", p)):
            lines.append(f"| {name} | {v['kernels_per_step']:.1f} | {v['kernel_us_per_step']:.1f} | "
                         f"{v['host_self_us_per_step']:.1f} |")
        lines += ["", "Kernels that differ most (count/step, GPU us/step):", "",
                  "| kernel | unpatched | patched |", "|---|---|---|"]
        for n, a, b in differences(u, p, "kernels", lambda x: (x or {"us": 0.0})["us"]):
            cu, cp = (u["kernels"].get(n) or {"count": 0})["count"], (p["kernels"].get(n) or {"count": 0})["count"]
            lines.append(f"| `{n[:90]}` | {cu:.1f} x, {a:.1f} us | {cp:.1f} x, {b:.1f} us |")
        lines += ["", "Host ops that differ most (self CPU us/step):", "", "| op | unpatched | patched |",
                  "|---|---|---|"]
        for n, a, b in differences(u, p, "host_ops", lambda x: x or 0.0):
            lines.append(f"| `{n[:90]}` | {a:.1f} | {b:.1f} |")
        lines.append("")
    return "\n".join(lines)


def parse_scenario(text: str, args: argparse.Namespace) -> e2e.Scenario:
    dtype, phase, batch, mode = text.split(":")
    if dtype not in e2e.DTYPES or phase not in e2e.PHASE_MODES or mode not in ("eager", "compile"):
        raise SystemExit(f"bad scenario {text!r}: want dtype:phase:batch:mode with mode eager or compile")
    return e2e.Scenario(dtype, phase, int(batch), args.seq if phase == "prefill" else args.ctx, mode)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m benchmarks.e2e_trace", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for e2e_trace.json and .md")
    ap.add_argument("--scenarios", default="fp16:decode:1:compile,fp16:prefill:1:compile")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.e2e_trace needs a CUDA GPU", file=sys.stderr)
        return 2
    e2e_args = e2e.parse_args(["--out", str(args.out), "--layers", str(args.layers), "--seq", str(args.seq),
                               "--ctx", str(args.ctx)])
    cfg = LlamaConfig.from_shapes(e2e_args.model, args.layers)
    bench = e2e.Bench(e2e_args, cfg)
    header = env.header(argv) | {"command": shlex.join(["python", "-m", "benchmarks.e2e_trace", *argv])}
    doc = {"environment": header, "steps": args.steps, "scenarios": []}
    with torch.no_grad():
        for text in args.scenarios.split(","):
            sc = parse_scenario(text, args)
            doc["scenarios"].append({"name": text} | trace_scenario(bench, sc, args.steps))
    e2e.unpatch_linear(bench.keep_patch_installed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "e2e_trace.json").write_text(json.dumps(doc, indent=1))
    (args.out / "e2e_trace.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
