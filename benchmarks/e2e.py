"""End-to-end benchmark: a Llama-style decoder stack with and without `cudal2_ops.patch_linear`.

    python -m benchmarks.e2e --out benchmarks/results/<gpu_slug>/          # full run (~3-4 min on an H100)
    python -m benchmarks.e2e --out $OUT --quick                            # tiny subset (< 1 min)

Model: benchmarks/llama_block.py with Llama-3-8B projection shapes (hidden 4096, intermediate 14336, 32 heads,
8 kv heads, head_dim 128), `--layers` layers, random weights, fp16 and bf16.
Scenarios: prefill (B x S tokens, causal) and decode (one new token per sequence at position `--ctx` with a
static KV cache), each in the modes eager / compile (torch.compile(fullgraph=True) per decoder layer) and, for decode,
graph / compile+graph (the step captured in a torch.cuda.CUDAGraph and replayed).
Each scenario runs the unpatched and the patched model (same weights and inputs) in short alternating blocks of timed
calls (default 20 rounds of 3 calls per variant), every other round reversed: each variant leads as often as it
follows, so clock and thermal drift, the first block after setup, and the host's slow spells (eager and compiled
steps are host-bound) weigh on both alike:
GPU time = CUDA events around the call; e2e latency = host perf_counter around the call with a synchronize before
and after. Reported: medians, tokens/s (from e2e latency), speedup = unpatched / patched, and the relative error
||patched - unpatched|| / ||unpatched|| of the stack's output (with, as a yardstick for non-eager modes, the same
error of unpatched-in-this-mode vs unpatched-eager).
Decode in the graph modes also times the step's projections alone (benchmarks/projection_bound.py): their share of
the step, their speedup, and the step speedup bound by streaming every weight at the copy bandwidth measured in the
same run.
A wall-clock budget (`--budget-s`) skips what is left once spent (listed as skipped, never silently dropped); the
JSON and markdown are rewritten after every scenario, so a run cut short still leaves its results.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cudal2_ops
from benchmarks import projection_bound
from benchmarks.decode_bandwidth import copy_bandwidth
from benchmarks.llama_block import LlamaConfig, LlamaStack, rope_tables, run_layers
from cudal2_testing.measure import env
from cudal2_testing.measure.summary import geomean
from cudal2_ops.patch import patch_linear, unpatch_linear

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
PHASE_MODES = {"prefill": ("eager", "compile"), "decode": ("eager", "graph", "compile", "compile+graph")}
FIRST_COMPILE_ESTIMATE_S = 30.0


@dataclass(frozen=True)
class Scenario:
    """One workload in one execution mode. seq: prompt length (prefill) or cached tokens (decode)."""

    dtype: str
    phase: str
    batch: int
    seq: int
    mode: str

    @property
    def workload(self) -> tuple[str, str, int, int]:
        return self.dtype, self.phase, self.batch, self.seq

    @property
    def new_tokens(self) -> int:
        return self.batch * (self.seq if self.phase == "prefill" else 1)


def plan(args: argparse.Namespace) -> list[Scenario]:
    """Scenarios in run order: every non-compiled mode first (cheap), then the compiled ones, fp16 before bf16."""
    out = []
    for compiled in (False, True):
        for dtype in args.dtypes:
            for phase, batches, seq in (("decode", args.decode_batches, args.ctx),
                                        ("prefill", args.prefill_batches, args.seq)):
                for batch in batches:
                    for mode in PHASE_MODES[phase]:
                        if mode in args.modes and mode.startswith("compile") == compiled:
                            out.append(Scenario(dtype, phase, batch, seq, mode))
    return out


class Workload:
    """Inputs of one (dtype, phase, batch, seq): hidden states, rope tables, KV caches (decode), and `step(layers)`."""

    def __init__(self, model: LlamaStack, sc: Scenario, seed: int):
        cfg, dtype, dev = model.cfg, DTYPES[sc.dtype], model.norm.weight.device
        gen = torch.Generator(device=dev).manual_seed(seed + sc.batch)
        s_new = sc.seq if sc.phase == "prefill" else 1
        pos = 0 if sc.phase == "prefill" else sc.seq
        self.model = model
        self.h = torch.randn(sc.batch, s_new, cfg.hidden, device=dev, generator=gen).to(dtype)
        self.cos, self.sin = rope_tables(cfg, torch.arange(pos, pos + s_new, device=dev), dtype)
        self.caches = None if sc.phase == "prefill" else model.new_cache(sc.batch, sc.seq + 1, generator=gen)

    def step(self, layers) -> Callable[[], torch.Tensor]:
        """The forward of the stack with `layers` (the model's own, or compiled wrappers) on these inputs."""
        return lambda: run_layers(layers, self.model.norm, self.h, self.cos, self.sin, self.caches)


def capture(fn: Callable[[], torch.Tensor], warmup: int = 3) -> Callable[[], torch.Tensor]:
    """Capture `fn` in a CUDA graph (after warm-up on a side stream); returns a replay that yields the static output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


class CudaL2OpCounter(TorchDispatchMode):
    """Counts calls of ops in the `cudal2` namespace dispatched while active."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func.namespace == "cudal2"
        return func(*args, **(kwargs or {}))


def time_block(fn: Callable[[], object], n: int, gpu_ms: list[float], host_ms: list[float]) -> None:
    """n timed calls: CUDA events around each call, and host perf_counter with a synchronize before and after."""
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        gpu_ms.append(start.elapsed_time(end))


def block_order(rounds: int) -> list[bool]:
    """Which variant (patched?) each timed block runs: (unpatched, patched) per round, every other round reversed."""
    return [patched for r in range(rounds) for patched in ((False, True) if r % 2 == 0 else (True, False))]


def stats(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "mean": statistics.fmean(samples), "min": min(samples),
            "max": max(samples), "n": len(samples)}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref32 = ref.float()
    return ((out.float() - ref32).norm() / ref32.norm().clamp_min(1e-30)).item()


class Bench:
    """Runs scenarios, keeping one model (and its compiled layers) per dtype and eager outputs as references."""

    def __init__(self, args: argparse.Namespace, cfg: LlamaConfig):
        self.args, self.cfg = args, cfg
        self.models: dict[str, LlamaStack] = {}
        self.compiled: dict[str, list[torch.nn.Module]] = {}
        self.eager_ref: dict[tuple, torch.Tensor] = {}
        self.compiled_workloads: set[tuple] = set()
        self.max_compile_s = FIRST_COMPILE_ESTIMATE_S
        self.compile_group: tuple[str, str] | None = None
        self.copy_bandwidth: dict | None = None  # measured once, on the first decode scenario in a graph mode
        self.chain_ms: dict[tuple[str, int], dict] = {}  # projection-chain GPU ms per (dtype, batch)
        # A routed Linear outside the models keeps the patched nn.Linear.forward installed for the whole run: both
        # variants then trace that forward (the unpatched one with its flag off, i.e. F.linear), and switching
        # variants recompiles through guards instead of resetting all compiled code (see cudal2_ops.patch).
        self.keep_patch_installed = torch.nn.Linear(1, 1)
        patch_linear(self.keep_patch_installed)

    def model(self, dtype: str) -> LlamaStack:
        if dtype not in self.models:
            torch.manual_seed(self.args.seed)
            self.models[dtype] = LlamaStack(self.cfg, device="cuda", dtype=DTYPES[dtype]).eval()
            self.compiled[dtype] = [torch.compile(layer, fullgraph=True) for layer in self.models[dtype].layers]
        return self.models[dtype]

    def set_patched(self, model: LlamaStack, patched: bool) -> None:
        if patched:
            patch_linear(model, include=self.args.include, exclude=self.args.exclude)
        else:
            unpatch_linear(model)

    def expected_setup_s(self, sc: Scenario) -> float:
        compiles = sc.mode.startswith("compile") and sc.workload not in self.compiled_workloads
        return self.max_compile_s if compiles else 0.0

    def runner(self, sc: Scenario, work: Workload, model: LlamaStack, patched: bool) -> Callable[[], torch.Tensor]:
        layers = self.compiled[sc.dtype] if sc.mode.startswith("compile") else model.layers
        return self.runner_for(model, patched, work.step(layers), graph=sc.mode.endswith("graph"))

    def runner_for(self, model: LlamaStack, patched: bool, fn: Callable[[], torch.Tensor], graph: bool
                   ) -> Callable[[], torch.Tensor]:
        """`fn` with the model (un)patched, captured in a CUDA graph if `graph`."""
        self.set_patched(model, patched)
        return capture(fn) if graph else fn

    def run(self, sc: Scenario) -> dict:
        args, model = self.args, self.model(sc.dtype)
        if sc.mode.startswith("compile") and (sc.dtype, sc.phase) != self.compile_group:
            # Fresh dynamo state per (dtype, phase): automatic-dynamic decisions made for one phase's shapes (e.g.
            # prefill's sequence length) must not leak into another's graphs.
            torch._dynamo.reset()
            self.compile_group = (sc.dtype, sc.phase)
        work = Workload(model, sc, args.seed)
        t0 = time.perf_counter()
        runners, outs = {}, {}
        for patched in (False, True):
            runners[patched] = self.runner(sc, work, model, patched)
            outs[patched] = runners[patched]().clone()
        torch.cuda.synchronize()
        setup_s = time.perf_counter() - t0
        if sc.mode.startswith("compile"):
            if sc.workload not in self.compiled_workloads:
                self.max_compile_s = max(self.max_compile_s if self.compiled_workloads else 0.0, setup_s)
            self.compiled_workloads.add(sc.workload)
        row = {"setup_s": setup_s, "rel_err": rel_err(outs[True], outs[False])}
        if sc.mode == "eager":
            self.eager_ref[sc.workload] = outs[False]
            row["cudal2_calls_per_step"] = self.count_cudal2_calls(runners, model)
        elif sc.workload in self.eager_ref:
            row["rel_err_unpatched_vs_eager"] = rel_err(outs[False], self.eager_ref[sc.workload])
        del outs
        row.update(self.measure(runners, model, sc))
        if sc.phase == "decode" and sc.mode.endswith("graph"):
            row["projections"] = self.projections(sc, model, row["unpatched"]["gpu_ms"]["median"])
        return row

    def projections(self, sc: Scenario, model: LlamaStack, step_ms: float) -> dict:
        """The step's projections alone in a CUDA graph, unpatched vs patched, and the bounds they put on the step."""
        if self.copy_bandwidth is None:
            self.copy_bandwidth = copy_bandwidth()
        key = (sc.dtype, sc.batch)
        if key not in self.chain_ms:  # the compile+graph scenario reuses the graph scenario's chain
            chain = projection_bound.ProjectionChain(model, sc.batch, seed=self.args.seed)
            runners = {patched: self.runner_for(model, patched, chain.step(), graph=True) for patched in (False, True)}
            samples = self.time_alternating(runners, model)
            self.chain_ms[key] = {name: statistics.median(samples[patched][0])
                                  for patched, name in ((False, "unpatched"), (True, "patched"))}
        ms = self.chain_ms[key]
        nbytes = projection_bound.weight_bytes(projection_bound.linear_modules(model))
        floor = projection_bound.floor_ms(nbytes, self.copy_bandwidth["gbs"])
        return {"unpatched_ms": ms["unpatched"], "patched_ms": ms["patched"],
                "speedup": ms["unpatched"] / ms["patched"], "weight_bytes": nbytes, "floor_ms": floor,
                "pct_of_copy_bandwidth": {name: 100 * floor / t for name, t in ms.items()},
                **projection_bound.bounds(step_ms, ms["unpatched"], floor)}

    def count_cudal2_calls(self, runners: dict, model: LlamaStack) -> dict:
        counts = {}
        for patched, name in ((False, "unpatched"), (True, "patched")):
            self.set_patched(model, patched)
            with CudaL2OpCounter() as counter:
                runners[patched]()
            counts[name] = counter.calls
        return counts

    def time_alternating(self, runners: dict, model: LlamaStack) -> dict[bool, tuple[list[float], list[float]]]:
        """(GPU ms, e2e ms) samples per variant, timed in the blocks of `block_order`."""
        args = self.args
        samples = {p: ([], []) for p in runners}
        per_block = math.ceil(args.iters / args.rounds)
        for patched in block_order(args.rounds):
            self.set_patched(model, patched)
            for _ in range(args.warmup):
                runners[patched]()
            time_block(runners[patched], per_block, *samples[patched])
        return samples

    def measure(self, runners: dict, model: LlamaStack, sc: Scenario) -> dict:
        samples = self.time_alternating(runners, model)
        out = {}
        for patched, name in ((False, "unpatched"), (True, "patched")):
            gpu, host = samples[patched]
            out[name] = {"gpu_ms": stats(gpu), "e2e_ms": stats(host),
                         "tokens_per_s": sc.new_tokens / (statistics.median(host) / 1e3)}
        for metric in ("gpu_ms", "e2e_ms"):
            out[f"speedup_{metric[:-3]}"] = out["unpatched"][metric]["median"] / out["patched"][metric]["median"]
        return out


def environment(argv: list[str], cfg: LlamaConfig, args: argparse.Namespace) -> dict:
    """cudal2_testing.measure.env's header plus this benchmark's model, patch filters and protocol."""
    hdr = env.header(argv)
    hdr["command"] = shlex.join([sys.executable.rsplit("/", 1)[-1], "-m", "benchmarks.e2e", *argv])
    hdr["cudal2_available"] = cudal2_ops.is_available()
    hdr["fp16_reduced_precision_reduction"] = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    hdr["bf16_reduced_precision_reduction"] = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    hdr["model"] = {"name": args.model, "random_weights": True, **asdict(cfg)}
    meta_model = LlamaStack(cfg, device="meta")
    routed = patch_linear(meta_model, include=args.include, exclude=args.exclude).names
    unpatch_linear(meta_model)
    hdr["patch"] = {"include": args.include, "exclude": args.exclude, "routed_linear_modules": len(routed),
                    "linear_modules": sum(isinstance(m, torch.nn.Linear) for m in meta_model.modules())}
    hdr["protocol"] = {"iters": args.iters, "rounds": args.rounds, "warmup_per_block": args.warmup,
                       "budget_s": args.budget_s, "timing": "CUDA events (gpu_ms) and perf_counter with synchronize "
                       "(e2e_ms) around each call; unpatched/patched blocks alternate, every other round reversed; "
                       "medians"}
    return hdr


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def markdown(doc: dict) -> str:
    h, m = doc["environment"], doc["environment"]["model"]
    smi = h.get("nvidia_smi", {})
    lines = [
        f"# End-to-end: Llama-style stack ({m['name']} shapes, {m['layers']} layers, random weights), "
        "cudal2 patch_linear vs unpatched",
        "",
        f"- GPU: {h['gpu']} ({h['sm_count']} SMs), driver {smi.get('driver_version', '?')}, CUDA {h['cuda']}, "
        f"torch {h['torch']}, commit {h['commit']}, date {h['date']}",
        f"- command: `{h['command']}`; cudal2 extension available: {h['cudal2_available']}"
        + "".join(f"; {name}={value}" for name, value in h.get("cudal2_environment", {}).items())
        + ("" if h["cudal2_available"] else " (NOT available: the patched path ran torch, speedups are noise)"),
        f"- protocol: {h['protocol']['timing']}; {h['protocol']['iters']} timed calls per variant",
        f"- patched: {h['patch']['routed_linear_modules']} of {h['patch']['linear_modules']} nn.Linear modules "
        f"(include {h['patch']['include']}, exclude {h['patch']['exclude']})",
        "- speedup = unpatched / patched (> 1: patched faster); rel err = ||patched - unpatched|| / ||unpatched|| of "
        "the stack output; floor = same error of unpatched in this mode vs unpatched eager",
        "",
        "| dtype | phase | batch | seq | mode | GPU ms unpatched | GPU ms patched | speedup GPU | e2e ms unpatched | "
        "e2e ms patched | speedup e2e | tok/s patched | rel err | floor | cudal2 ops/step | setup s | status |",
        "|" + "---|" * 17,
    ]
    for r in doc["rows"]:
        u, p = r.get("unpatched"), r.get("patched")
        calls = r.get("cudal2_calls_per_step")
        lines.append("| " + " | ".join([
            r["dtype"], r["phase"], str(r["batch"]), str(r["seq"]), r["mode"],
            _f(u and u["gpu_ms"]["median"], ".3f"), _f(p and p["gpu_ms"]["median"], ".3f"),
            _f(r.get("speedup_gpu"), ".3f"),
            _f(u and u["e2e_ms"]["median"], ".3f"), _f(p and p["e2e_ms"]["median"], ".3f"),
            _f(r.get("speedup_e2e"), ".3f"), _f(p and p["tokens_per_s"], ",.0f"),
            _f(r.get("rel_err"), ".2e"), _f(r.get("rel_err_unpatched_vs_eager"), ".2e"),
            "-" if calls is None else f"{calls['patched']} (unpatched {calls['unpatched']})",
            _f(r.get("setup_s"), ".1f"), r["status"]]) + " |")
    lines += ["", "Geomean speedup (patched over unpatched) of completed scenarios:", "",
              "| phase | mode | n | GPU | e2e |", "|---|---|---|---|---|"]
    for (phase, mode), rows in sorted(group_ok(doc["rows"]).items()):
        lines.append(f"| {phase} | {mode} | {len(rows)} | "
                     f"{geomean(r['speedup_gpu'] for r in rows):.3f} | "
                     f"{geomean(r['speedup_e2e'] for r in rows):.3f} |")
    return "\n".join(lines + projection_lines(doc)) + "\n"


def projection_lines(doc: dict) -> list[str]:
    """The decode projection table (rows with a `projections` entry), or nothing."""
    rows = [r for r in doc["rows"] if r.get("projections")]
    if not rows:
        return []
    bw = doc["environment"].get("copy_bandwidth") or {}
    target = rows[0]["projections"]["target"]
    lines = ["", "Decode projections alone (benchmarks/projection_bound.py): the step's nn.Linear calls back to back in "
             "one CUDA graph, unpatched vs patched, GPU ms medians; share = their part of the unpatched step; % BW = "
             f"weight bytes / time as % of the copy bandwidth measured in this run ({_f(bw.get('gbs'), ',.0f')} GB/s, "
             f"{bw.get('source', '?')}); ceiling = step speedup if every weight streamed at that bandwidth; needed = "
             f"projection speedup for a {target:.2f}x step (- : unreachable).", "",
             "| dtype | batch | mode | step speedup GPU | projections ms unpatched | patched | projection speedup | "
             "share | % BW unpatched | % BW patched | ceiling | needed |", "|" + "---|" * 12]
    for r in rows:
        pr = r["projections"]
        lines.append("| " + " | ".join([
            r["dtype"], str(r["batch"]), r["mode"], _f(r["speedup_gpu"], ".3f"), _f(pr["unpatched_ms"], ".3f"),
            _f(pr["patched_ms"], ".3f"), _f(pr["speedup"], ".3f"), _f(pr["share"], ".2f"),
            _f(pr["pct_of_copy_bandwidth"]["unpatched"], ".1f"), _f(pr["pct_of_copy_bandwidth"]["patched"], ".1f"),
            _f(pr["ceiling"], ".3f"), _f(pr["needed_projection_speedup"], ".3f")]) + " |")
    return lines


def group_ok(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["status"] == "ok":
            groups.setdefault((r["phase"], r["mode"]), []).append(r)
    return groups


def write(doc: dict, out_dir: Path, stem: str) -> None:
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown(doc))


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _names(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [v for v in text.split(",") if v]
        bad = [v for v in names if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {choices}")
        return names
    return parse


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.e2e", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for e2e_<date>.json and .md")
    ap.add_argument("--quick", action="store_true", help="tiny subset (< 1 min): 2 layers, fp16, decode B 1 and 32, "
                    "prefill B 1 x 512, modes eager and graph unless --modes is given")
    ap.add_argument("--model", default="llama-3-8b", help="shape set in cudal2_testing/measure/llm_shapes.json")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dtypes", type=_names(tuple(DTYPES)), default=list(DTYPES))
    ap.add_argument("--modes", type=_names(PHASE_MODES["decode"]), default=None, help="default: all")
    ap.add_argument("--prefill-batches", type=_ints, default=[1, 4])
    ap.add_argument("--seq", type=int, default=2048, help="prefill tokens per sequence")
    ap.add_argument("--decode-batches", type=_ints, default=[1, 8, 32, 64])
    ap.add_argument("--ctx", type=int, default=1024, help="cached tokens before the decoded one")
    ap.add_argument("--iters", type=int, default=60, help="timed calls per variant")
    ap.add_argument("--rounds", type=int, default=20,
                    help="rounds of one unpatched and one patched block (even: every other round is reversed)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls before each block")
    ap.add_argument("--budget-s", type=float, default=170.0, help="skip remaining scenarios once this is spent")
    ap.add_argument("--include", nargs="*", default=None,
                    help="patch only Linear modules matching these fnmatch patterns (e.g. '*.mlp.*'); default all")
    ap.add_argument("--exclude", nargs="*", default=None, help="never patch modules matching these patterns")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.rounds % 2:
        ap.error(f"--rounds must be even and >= 2 (each variant leads in half of the rounds), got {args.rounds}")
    if args.quick:
        args.layers, args.dtypes, args.decode_batches, args.prefill_batches, args.seq = 2, ["fp16"], [1, 32], [1], 512
        args.iters, args.rounds, args.budget_s = 10, 2, min(args.budget_s, 40.0)
        args.modes = args.modes or ["eager", "graph"]
    args.modes = args.modes or list(PHASE_MODES["decode"])
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.e2e needs a CUDA GPU", file=sys.stderr)
        return 2
    # The layers share one code object: its cache holds (unpatched, patched) x shapes entries.
    knob = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, knob, 64)
    start = time.perf_counter()
    cfg = LlamaConfig.from_shapes(args.model, args.layers)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "e2e_" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {"environment": environment(argv, cfg, args), "rows": []}
    bench = Bench(args, cfg)
    for sc in plan(args):
        elapsed = time.perf_counter() - start
        row = asdict(sc) | {"new_tokens": sc.new_tokens}
        if elapsed + bench.expected_setup_s(sc) > args.budget_s:
            row["status"] = f"skipped: time budget ({elapsed:.0f} s spent of {args.budget_s:.0f} s)"
        else:
            try:
                with torch.no_grad():
                    row |= bench.run(sc)
                row["status"] = "ok"
            except Exception as exc:  # one failing scenario must not lose the others
                row["status"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                row["traceback"] = traceback.format_exc(limit=6)
            torch.cuda.empty_cache()
        doc["rows"].append(row)
        doc["environment"]["wall_s"] = time.perf_counter() - start
        doc["environment"]["copy_bandwidth"] = bench.copy_bandwidth
        write(doc, args.out, stem)
        print(f"[{time.perf_counter() - start:6.1f}s] {sc.dtype} {sc.phase} B={sc.batch} {sc.mode}: "
              f"{row['status']}" + (f", speedup e2e {row['speedup_e2e']:.3f}" if "speedup_e2e" in row else ""),
              flush=True)
    for model in [*bench.models.values(), bench.keep_patch_installed]:
        unpatch_linear(model)
    print(f"wrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
