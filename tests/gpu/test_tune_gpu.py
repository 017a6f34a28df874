"""Measured choices on the GPU: cuBLASLt configurations as table entries (checked on first use, a bad one falls back
with one warning), the baseline cuBLASLt instance kept apart from the dispatcher, and record -> tune -> rerun on a small
Llama-shaped model in eager mode, under torch.compile and inside CUDA-graph capture."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import cudal2_ops
from cudal2_ops import tables, tune
from cudal2_ops._extension import _C

pytestmark = pytest.mark.skipif(not cudal2_ops.is_available(), reason="compiled extension not built")


def run_python(code: str, env: dict) -> dict:
    """Runs `code` in a fresh process (tables load once per process) and returns the JSON it prints last."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def header() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"schema_version": 1, "gpu_name": props.name, "sm_count": props.multi_processor_count,
            "cuda": torch.version.cuda, "cublaslt_version": int(_C.cublaslt_version())}


@pytest.mark.parametrize("layout,dtype", [("nt", "fp16"), ("nn", "bf16")])
def test_every_heuristic_candidate_runs_from_its_configuration(layout, dtype):
    run = tune.ProblemRun.make(tune.Problem(layout, dtype, 96, 320, 200))
    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, layout)
    assert configs and all(len(c) == len(tables.LT_CONFIG_FIELDS) for c in configs)
    for config in configs:
        assert run.correct(lambda config=config: run.run_config(config)), config


def test_extra_kernels_are_timed_where_the_library_holds_them():
    problem = tune.Problem("nt", "fp16", 64, 64, 64)
    loaded = sorted(n for n in _C.kernel_names() if _C.kernel_info(n)["layout"] == "nt"
                    and _C.kernel_info(n)["dtype"] == "fp16" and n.startswith("sm80"))
    assert loaded, "no sm80 nt fp16 kernel in the library"
    extra = [(loaded[0], tune.Knobs()), ("no_such_kernel", tune.Knobs())]
    assert tune.kernel_candidates(problem, "table", None, extra) == [(loaded[0], tune.Knobs())]
    assert tune.kernel_candidates(problem, "none", None, extra) == []
    entry = tune.tune_problem(problem, tune.kernel_candidates(problem, "table", None, extra), margin=-1.0)
    assert entry["kernel"] == loaded[0]  # a negative margin: the kernel is chosen whenever it ran correctly


def test_an_unknown_configuration_is_refused_with_its_reason():
    run = tune.ProblemRun.make(tune.Problem("nt", "fp16", 64, 64, 64))
    with pytest.raises(RuntimeError, match="cuBLASLt"):
        run.run_config([987654, 0, 0, 1, 0, 0, 0, 0, 0])


def test_a_table_configuration_runs_and_a_bad_one_falls_back_with_one_warning(tmp_path):
    run = tune.ProblemRun.make(tune.Problem("nt", "fp16", 200, 384, 512))
    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, "nt")
    good = dict(zip(tables.LT_CONFIG_FIELDS, configs[-1]))
    bad = dict(good, algo_id=987654)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"header": header(), "entries": {
        "nt_fp16_200_384_512": {"cublaslt": good}, "nt_fp16_100_384_512": {"cublaslt": bad}}}))
    out = run_python("""
        import json, warnings, torch, cudal2_ops
        w = torch.randn(384, 512, device="cuda", dtype=torch.float16)
        res = {}
        for m in (200, 100):
            x = torch.randn(m, 512, device="cuda", dtype=torch.float16)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                y1 = cudal2_ops.linear(x, w)
                y2 = cudal2_ops.linear(x, w)
            ref = x.float() @ w.float().t()
            res[m] = {"explain": cudal2_ops.explain(x, w, layout="nt"),
                      "err": max(((y.float() - ref).norm() / ref.norm()).item() for y in (y1, y2)),
                      "warnings": [str(c.message) for c in caught if "cuBLASLt configuration" in str(c.message)]}
        print(json.dumps(res))
    """, {"CUDAL2_TABLE": str(path), "CUDAL2_TUNED_TABLE": str(tmp_path / "none.json")})
    hit, miss = out["200"], out["100"]
    assert hit["explain"]["cublaslt_policy"] == "table" and hit["err"] <= 1e-3 and not hit["warnings"]
    assert f"algo_id={good['algo_id']}" in hit["explain"]["cublaslt_config"]
    assert miss["explain"]["cublaslt_policy"] == "heuristic" and miss["err"] <= 1e-3
    assert len(miss["warnings"]) == 1 and "nt_fp16_100_384_512" in miss["warnings"][0]


def slow_entry_with_a_fast_near_tie(tmp_path) -> tuple:
    """A table file whose entry for nt fp16 512x1024x4096 is the problem's slowest cuBLASLt candidate, with its fastest
    as the one near-tie (skips where they are within 30%). Returns (path, slow, fast), the two as explain writes them."""
    run = tune.ProblemRun.make(tune.Problem("nt", "fp16", 512, 1024, 4096))
    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, "nt")
    timed = sorted((tune.graph_time_us(lambda c=c: run.run_config(c)), i) for i, c in enumerate(configs))
    (fast_us, fast), (slow_us, slow) = timed[0], timed[-1]
    if slow_us < 1.3 * fast_us:
        pytest.skip(f"candidates within 30% of each other here ({fast_us:.1f} / {slow_us:.1f} us)")
    entry = {"cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, configs[slow])),
             "cublaslt_near": [{"cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, configs[fast]))}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"header": header(), "entries": {"nt_fp16_512_1024_4096": entry}}))
    return (path, *(" ".join(f"{name}={value}" for name, value in zip(tables.LT_CONFIG_FIELDS, configs[i]))
                    for i in (slow, fast)))


def test_near_ties_are_timed_at_the_first_eager_call_and_the_fastest_kept(tmp_path):
    """An entry whose configuration is the problem's slowest candidate, with its fastest as a near-tie: explain shows
    the entry's configuration until a call outside capture times both and keeps the fastest (pick 1); a first call
    under CUDA-graph capture runs the entry's own and confirms nothing; results stay correct throughout; with
    confirmation off (the default, no CUDAL2_CONFIRM_NEAR_TIES) the entry's configuration runs after eager calls too."""
    path, slow_config, fast_config = slow_entry_with_a_fast_near_tie(tmp_path)
    code = """
        import json, torch, cudal2_ops
        x = torch.randn(512, 4096, device="cuda", dtype=torch.float16)
        w = torch.randn(1024, 4096, device="cuda", dtype=torch.float16)
        ref = x.float() @ w.float().t()
        err = lambda y: ((y.float() - ref).norm() / ref.norm()).item()
        seen, errs = [cudal2_ops.explain(x, w, layout="nt")], []
        graph, out = torch.cuda.CUDAGraph(), None
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = cudal2_ops.linear(x, w)
        graph.replay(); torch.cuda.synchronize()
        errs.append(err(out)); seen.append(cudal2_ops.explain(x, w, layout="nt"))
        errs.append(err(cudal2_ops.linear(x, w))); seen.append(cudal2_ops.explain(x, w, layout="nt"))
        graph.replay(); torch.cuda.synchronize()
        errs.append(err(out))
        print(json.dumps({"seen": seen, "errs": errs}))
    """
    env = {"CUDAL2_TABLE": str(path), "CUDAL2_TUNED_TABLE": str(tmp_path / "none.json")}
    out = run_python(code, {**env, "CUDAL2_CONFIRM_NEAR_TIES": "1"})
    assert max(out["errs"]) <= 1e-3, out["errs"]
    before, captured, eager = out["seen"]
    for info in (before, captured):
        assert info["cublaslt_near_ties"] == 1 and info["cublaslt_near_tie_pick"] == -1, info
        assert info["cublaslt_config"] == slow_config, info
    assert eager["cublaslt_near_tie_pick"] == 1 and eager["cublaslt_config"] == fast_config, eager
    fixed = run_python(code, env)
    assert max(fixed["errs"]) <= 1e-3
    assert all(info["cublaslt_near_ties"] == 0 and info["cublaslt_config"] == slow_config for info in fixed["seen"])


def test_the_benchmarks_shipped_choice_runs_the_entry_beside_a_confirmed_cudal2(tmp_path):
    """benchmarks.impls' cudal2-shipped runs the table entry's configuration as shipped, correctly, while cudal2 in the
    same process has confirmed its faster near-tie; on a problem the table does not list it is cudal2's call."""
    path, slow_config, fast_config = slow_entry_with_a_fast_near_tie(tmp_path)
    out = run_python("""
        import json, torch, cudal2_ops
        from benchmarks import impls
        (ours,), _ = impls.build(["cudal2"], ["nt"])
        (shipped,), _ = impls.build(["cudal2-shipped"], ["nt"])
        res = {}
        for m in (512, 500):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
            w = torch.randn(1024, 4096, device="cuda", dtype=torch.float16)
            out = torch.empty(m, 1024, device="cuda", dtype=torch.float16)
            ref = x.float() @ w.float().t()
            y_ours = ours.call(x, w, out).clone()
            y_shipped = shipped.call(x, w, out).clone()
            res[m] = {"err": max(((y.float() - ref).norm() / ref.norm()).item() for y in (y_ours, y_shipped)),
                      "ours": ours.describe(x, w, out), "shipped": shipped.describe(x, w, out)}
        print(json.dumps(res))
    """, {"CUDAL2_TABLE": str(path), "CUDAL2_TUNED_TABLE": str(tmp_path / "none.json"), "CUDAL2_CONFIRM_NEAR_TIES": "1"})
    listed, unlisted = out["512"], out["500"]
    assert listed["err"] <= 1e-3 and unlisted["err"] <= 1e-3
    assert listed["ours"]["cublaslt_config"] == fast_config and listed["ours"]["cublaslt_near_tie_pick"] == 1
    fields = dict(item.split("=") for item in slow_config.split())
    assert listed["shipped"] == {"path": "cublaslt", "cublaslt_config": [int(fields[n]) for n in tables.LT_CONFIG_FIELDS]}
    assert unlisted["shipped"] == unlisted["ours"]


def test_the_baseline_instance_does_not_tune_the_dispatcher():
    x = torch.randn(72, 136, device="cuda", dtype=torch.float16)
    w = torch.randn(264, 136, device="cuda", dtype=torch.float16)
    out = torch.empty(72, 264, device="cuda", dtype=torch.float16)
    _C.testing.cublaslt_matmul(x, w, None, out, "nt", "autotune")
    assert cudal2_ops.explain(x, w, layout="nt")["cublaslt_policy"] in ("heuristic", "table")


MODEL = """
    import json, torch, cudal2_ops
    from torch import nn

    class Block(nn.Module):  # Llama-shaped projections at a small width
        def __init__(self, d=256, ff=704, kv=64):
            super().__init__()
            self.q, self.k, self.v, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, kv, bias=False), \\
                nn.Linear(d, kv, bias=False), nn.Linear(d, d, bias=False)
            self.gate, self.up, self.down = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), \\
                nn.Linear(ff, d, bias=False)

        def forward(self, x):
            x = x + self.o(self.q(x) + torch.nn.functional.pad(self.k(x) * self.v(x), (0, 192)))
            return x + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))

    torch.manual_seed(0)
    model = Block().cuda().half()
    cudal2_ops.patch_linear(model)
"""


def test_record_tune_rerun_dispatches_every_recorded_problem_to_its_tuned_choice(tmp_path):
    problems_file, table_file = tmp_path / "problems.json", tmp_path / "tuned.json"
    recorded = run_python(MODEL + f"""
    with cudal2_ops.record_problems({str(problems_file)!r}) as eager:
        model(torch.randn(5, 256, device="cuda", dtype=torch.float16))
    compiled = torch.compile(model, fullgraph=True)
    with cudal2_ops.record_problems({str(problems_file)!r}) as comp:
        compiled(torch.randn(24, 256, device="cuda", dtype=torch.float16))
    static = torch.randn(3, 256, device="cuda", dtype=torch.float16)
    model(static); torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with cudal2_ops.record_problems({str(problems_file)!r}) as cap:
        with torch.cuda.graph(graph):
            model(static)
    graph.replay(); torch.cuda.synchronize()
    print(json.dumps([[p.m for p in r.problems] for r in (eager, comp, cap)]))
    """, {"CUDAL2_TUNED_TABLE": str(table_file)})
    assert [sorted(set(ms)) for ms in recorded] == [[5], [24], [3]]
    assert all(len(ms) == 4 for ms in recorded)  # (N, K): q/o (256, 256), k/v (64, 256), gate/up (704, 256), down
    problems = tune.read_problems(problems_file)
    assert len(problems) == 12
    proc = subprocess.run([sys.executable, "-m", "cudal2_ops.tune", "--problems", str(problems_file), "--out",
                           str(table_file), "--no-progress"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "tuned 12 problems" in proc.stdout
    entries = json.loads(table_file.read_text())["entries"]
    assert set(entries) == {p.key for p in problems}
    rerun = run_python(MODEL + f"""
    from cudal2_ops import tune
    res = {{}}
    for p in tune.read_problems({str(problems_file)!r}):
        x = torch.randn(p.m, p.k, device="cuda", dtype=torch.float16)
        w = torch.randn(p.n, p.k, device="cuda", dtype=torch.float16)
        res[p.key] = cudal2_ops.explain(x, w, layout="nt")
    print(json.dumps(res))
    """, {"CUDAL2_TUNED_TABLE": str(table_file)})
    for key, entry in entries.items():
        info = rerun[key]
        if entry.get("kernel"):
            assert info["path"] == "kernel" and info["kernel"] == entry["kernel"], (key, info)
        else:
            assert info["cublaslt_policy"] == "table", (key, info)
            assert f"algo_id={entry['cublaslt']['algo_id']} " in info["cublaslt_config"], (key, info)
