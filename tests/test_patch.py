"""CPU tests of cudal2_ops.patch: scopes, filters, nesting, subclasses, swap, routing rule, torch.compile tracing.

`cudal2_ops.linear` is replaced by a counting stand-in; routing on CPU is exercised by replacing the routing
predicate `_route_dtype` with one that accepts CPU fp32 (the real predicate is checked on fake CUDA tensors).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import cudal2_ops
from cudal2_ops import patch as P

TORCH_FORWARD = nn.Linear.forward


@torch.library.custom_op("cudal2_test::linear", mutates_args=())
def _standin_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight, bias)


@_standin_op.register_fake
def _(x, weight, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _standin_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    g2 = grad.reshape(-1, grad.shape[-1])
    return grad @ weight, g2.t() @ x.reshape(-1, x.shape[-1]), (g2.sum(0) if ctx.has_bias else None)


def _standin_setup(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None


_standin_op.register_autograd(_standin_backward, setup_context=_standin_setup)


class Calls:
    """Counting stand-in for cudal2_ops.linear."""

    def __init__(self):
        self.n = 0

    def __call__(self, x, weight, bias=None):
        self.n += 1
        return torch.ops.cudal2_test.linear(x, weight, bias)


@pytest.fixture
def calls(monkeypatch):
    stand_in = Calls()
    monkeypatch.setattr(cudal2_ops, "linear", stand_in, raising=False)
    yield stand_in
    P.unpatch_linear()
    assert nn.Linear.forward is TORCH_FORWARD or P._flagged, "patch left installed with nothing patched"


@pytest.fixture
def cpu_route(monkeypatch):
    """Make CPU fp32 calls routable, so routing is observable without a GPU."""
    monkeypatch.setattr(P, "_route_dtype", lambda x, w, b: x.dtype if x.dtype == torch.float32 else None)


class LoRALike(nn.Linear):
    """A subclass that overrides forward and calls nn.Linear.forward for its base output."""

    def forward(self, x):
        return super().forward(x) + 1.0


class NoOverride(nn.Linear):
    pass


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.ModuleDict({"q_proj": nn.Linear(8, 8), "k_proj": nn.Linear(8, 4, bias=False)}),
                         nn.ModuleDict({"up_proj": nn.Linear(8, 16), "down_proj": nn.Linear(16, 8),
                                        "lora": LoRALike(8, 8), "plain_sub": NoOverride(8, 8)}))


def run(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    return [m(x if m.in_features == 8 else x.repeat(1, 2)) for m in model.modules() if isinstance(m, nn.Linear)]


def test_process_patch_is_reversible_and_idempotent(calls):
    assert P.patch_linear().scope == "process"
    P.patch_linear()
    assert nn.Linear.forward is P._patched_forward and P.is_linear_patched()
    P.unpatch_linear()
    assert nn.Linear.forward is TORCH_FORWARD and not hasattr(nn.Linear, "_cudal2_route")
    P.unpatch_linear()
    assert nn.Linear.forward is TORCH_FORWARD


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_cpu_calls_are_bitwise_f_linear(calls, dtype):
    model = tiny_model().to(dtype)
    x = torch.randn(3, 8, dtype=dtype)
    ref = run(model, x)
    P.patch_linear()
    P.patch_linear(model, include_subclasses=True)
    out = run(model, x)
    assert calls.n == 0
    for a, b in zip(out, ref):
        assert torch.equal(a, b)
    P.unpatch_linear(model)


def test_process_patch_routes_plain_and_non_overriding_subclasses(calls, cpu_route):
    model = tiny_model()
    P.patch_linear()
    run(model, torch.randn(2, 8))
    assert calls.n == 5  # 4 nn.Linear + NoOverride; LoRALike overrides forward
    P.unpatch_linear()
    P.patch_linear(include_subclasses=True)
    run(model, torch.randn(2, 8))
    assert calls.n == 11


def test_model_patch_filters(calls, cpu_route):
    model = tiny_model()
    s = P.patch_linear(model, include=["*proj"], exclude="*.k_*")
    assert s.scope == "model" and s.names == ("0.q_proj", "1.up_proj", "1.down_proj") and s.skipped == ()
    other = tiny_model()
    run(other, torch.randn(2, 8))
    assert calls.n == 0, "a model patch must not touch other models"
    run(model, torch.randn(2, 8))
    assert calls.n == 3
    assert [P.is_linear_patched(m) for m in (model[0].q_proj, model[0].k_proj)] == [True, False]
    P.unpatch_linear(model)
    assert nn.Linear.forward is TORCH_FORWARD


def test_model_patch_subclasses(calls, cpu_route):
    model = tiny_model()
    s = P.patch_linear(model)
    assert s.skipped == ("1.lora",) and "1.plain_sub" in s.names
    x = torch.randn(2, 8)
    ref = F.linear(x, model[1].lora.weight, model[1].lora.bias) + 1.0
    calls.n = 0
    assert torch.equal(model[1].lora(x), ref) and calls.n == 0
    s = P.patch_linear(model, include="1.lora", include_subclasses=True)
    assert s.names == ("1.lora",)
    torch.testing.assert_close(model[1].lora(x), ref)
    assert calls.n == 1, "the subclass's super().forward goes through cudal2, its own logic stays"
    P.unpatch_linear(model)


def test_context_manager_nesting_restores_state(calls, cpu_route):
    model = tiny_model()
    with P.patched_linear():
        with P.patched_linear():
            pass
        assert P.is_linear_patched(), "inner exit must not undo the outer patch"
        with P.patched_linear(model, include="0.*") as s:
            assert s.names == ("0.q_proj", "0.k_proj")
            P.patch_linear(model, include="1.up_proj")
        assert not any(m.__dict__.get("_cudal2_route") for m in model.modules())
    assert not P.is_linear_patched() and nn.Linear.forward is TORCH_FORWARD
    P.patch_linear(model, include="1.up_proj")
    with P.patched_linear(model):
        pass
    assert P.is_linear_patched(model[1].up_proj) and not P.is_linear_patched(model[1].down_proj)
    P.unpatch_linear(model)
    assert nn.Linear.forward is TORCH_FORWARD


def test_filters_need_a_model():
    with pytest.raises(ValueError):
        P.patch_linear(include="*")


def test_swap_state_dict_compatible_and_reversible(calls, cpu_route):
    model = tiny_model()
    model[0].tied = model[0].q_proj
    params = {n: p for n, p in model.named_parameters()}
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    handle_calls = []
    model[1].up_proj.register_forward_hook(lambda m, i, o: handle_calls.append(1))
    s = P.swap_linear(model, exclude="*down*")
    assert s.names == ("0.q_proj", "0.k_proj", "1.up_proj") and s.skipped == ("1.lora", "1.plain_sub")
    assert isinstance(model[0].q_proj, P.CudaL2Linear) and model[0].tied is model[0].q_proj
    assert type(model[1].down_proj) is nn.Linear
    assert {n: p for n, p in model.named_parameters()} == params
    assert model.state_dict().keys() == sd.keys()
    plain = tiny_model()
    plain[0].tied = plain[0].q_proj
    plain.load_state_dict(model.state_dict())
    model.load_state_dict(sd)
    x = torch.randn(2, 8)
    torch.testing.assert_close(model[1].up_proj(x), plain[1].up_proj(x))
    assert calls.n == 1 and handle_calls == [1]
    assert P.patch_linear(model).names == ("1.down_proj", "1.plain_sub")
    P.unpatch_linear(model)
    assert P.unswap_linear(model) == ("0.q_proj", "0.k_proj", "1.up_proj")
    assert type(model[0].q_proj) is nn.Linear and model[0].tied is model[0].q_proj
    assert {n: p for n, p in model.named_parameters()} == params


def test_swapped_cpu_calls_are_bitwise_f_linear(calls):
    lin = nn.Linear(8, 4)
    x = torch.randn(5, 8)
    assert torch.equal(P.CudaL2Linear.from_linear(lin)(x), F.linear(x, lin.weight, lin.bias)) and calls.n == 0


def test_deepcopy_and_state_dict_of_patched_model(calls, cpu_route):
    model = tiny_model()
    P.patch_linear(model)
    assert "_cudal2_route" not in str(model.state_dict().keys())
    clone = copy.deepcopy(model)
    run(clone, torch.randn(2, 8))
    assert calls.n == 5
    P.unpatch_linear(model)
    P.unpatch_linear(clone)
    assert nn.Linear.forward is TORCH_FORWARD


def test_autograd_matches_unpatched(calls, cpu_route):
    model = tiny_model()
    x = torch.randn(4, 8, requires_grad=True)

    def grads():
        model.zero_grad()
        x.grad = None
        sum(o.square().sum() for o in run(model, x)).backward()
        return [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]

    ref = grads()
    with P.patched_linear(model, include_subclasses=True):
        got = grads()
    assert calls.n == 6
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_routed_call_sees_weight_and_bias_as_forward_would(calls, cpu_route):
    """Parametrized weights, attributes that replaced a parameter, and class-defined names reach the routed call
    exactly as `self.weight` / `self.bias` resolve; plain layers read the parameter dict (same objects)."""
    import torch.nn.utils.parametrize as parametrize

    class Double(nn.Module):
        def forward(self, w):
            return 2 * w

    plain, parametrized, reassigned, shadowed = (nn.Linear(8, 4) for _ in range(4))
    parametrize.register_parametrization(parametrized, "weight", Double())
    del reassigned.bias
    reassigned.bias = torch.full((4,), 5.0)  # a plain tensor attribute, no longer a parameter
    # A class property shadows a still-registered parameter (as parametrize does, with the parameter moved).
    shadowed.__class__ = type("BiasProperty", (nn.Linear,), {"bias": property(lambda self: torch.full((4,), 3.0))})
    layers = [plain, parametrized, reassigned, shadowed]
    x = torch.randn(3, 8)
    for layer in layers:
        P.patch_linear(layer)
    try:
        outs = [layer(x) for layer in layers]
    finally:
        for layer in layers:
            P.unpatch_linear(layer)
    assert calls.n == len(layers)
    assert P._linear_params(plain)[0] is plain.weight and P._linear_params(plain)[1] is plain.bias
    for layer, out in zip(layers, outs):
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=0, atol=0)


def test_torchscript_compiles_torch_forward(calls, cpu_route):
    lin = nn.Linear(8, 4)
    P.patch_linear()
    x = torch.randn(3, 8)
    for module in (lin, P.CudaL2Linear.from_linear(lin)):
        scripted = torch.jit.script(module)
        assert "cudal2" not in scripted.code and torch.equal(scripted(x), F.linear(x, lin.weight, lin.bias))
    assert calls.n == 0


def test_route_dtype_rule():
    with FakeTensorMode():
        x16 = torch.empty(2, 8, device="cuda", dtype=torch.float16)
        w16 = torch.empty(4, 8, device="cuda", dtype=torch.float16)
        wbf = torch.empty(4, 8, device="cuda", dtype=torch.bfloat16)
        w32 = torch.empty(4, 8, device="cuda")
        x32 = torch.empty(2, 8, device="cuda")
        x64 = torch.empty(2, 8, device="cuda", dtype=torch.float64)
        b32 = torch.empty(4, device="cuda")
        xcpu = torch.empty(2, 8, dtype=torch.float16)
        assert P._route_dtype(x16, w16, None) is torch.float16
        assert P._route_dtype(x16.bfloat16(), wbf, wbf[:, 0]) is torch.bfloat16
        assert P._route_dtype(x16, wbf, None) is None
        assert P._route_dtype(x16, w16, b32) is None
        assert P._route_dtype(x32, w32, None) is None
        assert P._route_dtype(xcpu, w16, None) is None
        assert P._route_dtype(x16, xcpu.t().contiguous(), None) is None
        torch.set_autocast_enabled("cuda", True)
        try:
            assert P._route_dtype(x32, w32, b32) is torch.float16
            assert P._route_dtype(x64, w32, None) is None
            torch.set_autocast_dtype("cuda", torch.bfloat16)
            assert P._route_dtype(x16, w32, None) is torch.bfloat16
        finally:
            torch.set_autocast_enabled("cuda", False)
            torch.set_autocast_dtype("cuda", torch.float16)


def _compiled_graph(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    out = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return out, graphs


def test_compile_traces_routed_calls_without_breaks(calls, cpu_route):
    torch._dynamo.reset()
    model = tiny_model()[1]
    x = torch.randn(2, 8)

    def step(inp):
        return model.down_proj(model.up_proj(inp))

    P.patch_linear(model, include="up_proj")
    out, graphs = _compiled_graph(step, x)
    torch.testing.assert_close(out, step(x))
    assert len(graphs) == 1 and str(graphs[0].code).count("cudal2_test.linear") == 1
    P.unpatch_linear(model)
    _, graphs = _compiled_graph(step, x)
    assert "cudal2_test" not in str(graphs[0].code), "unpatching must invalidate the compiled graph"
    torch._dynamo.reset()


def test_patching_after_compile_reaches_the_compiled_function(calls, cpu_route):
    """Compiled while nothing was patched (torch's forward traced, no guard on it), then patched: the same compiled
    function must route its next calls, not keep running the stale graph."""
    torch._dynamo.reset()
    model = tiny_model()[1]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(lambda inp: model.down_proj(model.up_proj(inp)), backend=backend, fullgraph=True)
    x = torch.randn(2, 8)
    compiled(x)
    assert len(graphs) == 1 and "cudal2_test" not in str(graphs[0].code)
    P.patch_linear(model)
    compiled(x)
    assert len(graphs) == 2 and str(graphs[1].code).count("cudal2_test.linear") == 2
    torch._dynamo.reset()


def test_compile_of_real_rule_on_cpu_is_unchanged(calls):
    torch._dynamo.reset()
    model = tiny_model()
    x = torch.randn(2, 8)
    P.patch_linear()
    out, graphs = _compiled_graph(lambda inp: model[1].down_proj(model[1].up_proj(inp)), x)
    assert len(graphs) == 1 and "cudal2" not in str(graphs[0].code)
    P.unpatch_linear()
    torch._dynamo.reset()


# ---- the end-to-end benchmark's model and driver pieces (benchmarks/llama_block.py, benchmarks/e2e.py) -----------

def tiny_llama():
    from benchmarks.llama_block import LlamaConfig, LlamaStack

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden=64, intermediate=96, heads=4, kv_heads=2, head_dim=16, layers=2)
    return LlamaStack(cfg).eval()


def test_llama_config_from_shapes():
    from benchmarks.llama_block import LlamaConfig

    cfg = LlamaConfig.from_shapes("llama-3-8b", layers=4)
    assert (cfg.hidden, cfg.intermediate, cfg.heads, cfg.kv_heads, cfg.head_dim) == (4096, 14336, 32, 8, 128)


def test_llama_decode_matches_prefill():
    from benchmarks.llama_block import rope_tables

    model = tiny_llama()
    cfg, s = model.cfg, 7
    h = torch.randn(2, s + 1, cfg.hidden)
    with torch.no_grad():
        ref = model(h, *rope_tables(cfg, torch.arange(s + 1), torch.float32))
        chunk_cache = model.new_cache(2, s)
        chunk = model(h[:, :s], *rope_tables(cfg, torch.arange(s), torch.float32), chunk_cache)
        step_cache = [tuple(torch.cat([t, torch.zeros_like(t[:, :, :1])], 2) for t in kv) for kv in chunk_cache]
        step = model(h[:, s:], *rope_tables(cfg, torch.arange(s, s + 1), torch.float32), step_cache)
    torch.testing.assert_close(chunk, ref[:, :s], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, ref[:, s:], rtol=1e-4, atol=1e-4)


def test_llama_patch_names_and_routing(calls, cpu_route):
    model = tiny_llama()
    s = P.patch_linear(model, include="*.mlp.*")
    assert len(s.names) == 3 * model.cfg.layers and all(n.endswith("_proj") for n in s.names)
    from benchmarks.llama_block import rope_tables

    with torch.no_grad():
        model(torch.randn(1, 3, model.cfg.hidden), *rope_tables(model.cfg, torch.arange(3), torch.float32))
    assert calls.n == 3 * model.cfg.layers
    P.unpatch_linear(model)


def test_e2e_plan_and_markdown():
    from benchmarks import e2e

    args = e2e.parse_args(["--out", "unused", "--dtypes", "bf16", "--modes", "eager,graph,compile",
                           "--decode-batches", "1,8", "--prefill-batches", "2"])
    plan = e2e.plan(args)
    assert [(s.phase, s.batch, s.mode) for s in plan] == [
        ("decode", 1, "eager"), ("decode", 1, "graph"), ("decode", 8, "eager"), ("decode", 8, "graph"),
        ("prefill", 2, "eager"), ("decode", 1, "compile"), ("decode", 8, "compile"), ("prefill", 2, "compile")]
    assert plan[4].new_tokens == 2 * 2048 and plan[0].new_tokens == 1
    quick = e2e.parse_args(["--out", "unused", "--quick"])
    assert quick.layers == 2 and quick.dtypes == ["fp16"] and quick.budget_s <= 40
    with pytest.raises(SystemExit):
        e2e.parse_args(["--out", "unused", "--modes", "turbo"])
    timing = {"gpu_ms": e2e.stats([1.0, 2.0, 3.0]), "e2e_ms": e2e.stats([2.0]), "tokens_per_s": 500.0}
    ok = {"dtype": "bf16", "phase": "decode", "batch": 1, "seq": 1024, "mode": "graph", "status": "ok",
          "unpatched": timing, "patched": timing, "speedup_gpu": 1.0, "speedup_e2e": 1.0, "rel_err": 1e-3,
          "setup_s": 0.5, "cudal2_calls_per_step": {"patched": 8, "unpatched": 0}}
    skipped = {"dtype": "bf16", "phase": "prefill", "batch": 2, "seq": 2048, "mode": "compile",
               "status": "skipped: time budget"}
    env = {"gpu": "X", "sm_count": 1, "cuda": "13.0", "torch": torch.__version__, "commit": "c", "date": "d",
           "command": "python -m benchmarks.e2e", "cudal2_available": False,
           "model": {"name": "llama-3-8b", "layers": 2}, "protocol": {"timing": "t", "iters": 3},
           "patch": {"include": None, "exclude": None, "routed_linear_modules": 14, "linear_modules": 14}}
    md = e2e.markdown({"environment": env, "rows": [ok, skipped]})
    assert "NOT available" in md and "skipped: time budget" in md and "| decode | graph | 1 | 1.000 | 1.000 |" in md
    assert "Decode projections alone" not in md
    ok["projections"] = {"unpatched_ms": 0.5, "patched_ms": 0.4, "speedup": 1.25, "share": 0.5, "ceiling": 1.6,
                         "pct_of_copy_bandwidth": {"unpatched": 60.0, "patched": 75.0}, "target": 1.1,
                         "needed_projection_speedup": None}
    env["copy_bandwidth"] = {"gbs": 4000.0, "source": "copy"}
    env["cudal2_environment"] = {"CUDAL2_DISABLE_KERNELS": "1"}
    md = e2e.markdown({"environment": env, "rows": [ok, skipped]})
    assert "available: False; CUDAL2_DISABLE_KERNELS=1" in md
    assert "(4,000 GB/s, copy)" in md and "| bf16 | 1 | graph | 1.000 | 0.500 | 0.400 | 1.250 | 0.50 | 60.0 | 75.0 | 1.600 | - |" in md


def test_e2e_blocks_balance_the_variants():
    from benchmarks import e2e

    order = e2e.block_order(4)
    assert order == [False, True, True, False, False, True, True, False]
    leads = [order[i] for i in range(0, len(order), 2)]
    assert leads.count(True) == leads.count(False)
    for rounds in ("3", "0"):
        with pytest.raises(SystemExit):
            e2e.parse_args(["--out", "unused", "--rounds", rounds])


def test_projection_bounds():
    from benchmarks import projection_bound as pb

    b = pb.bounds(step_ms=1.0, projections_ms=0.6, projections_floor_ms=0.4)
    assert b["share"] == pytest.approx(0.6) and b["ceiling"] == pytest.approx(1.0 / 0.8)
    # a 1.10x step (1/1.1 ms) leaves the projections 1/1.1 - 0.4 ms
    assert b["needed_projection_speedup"] == pytest.approx(0.6 / (1 / 1.1 - 0.4))
    assert pb.bounds(1.0, 0.05, 0.01)["needed_projection_speedup"] is None  # rest alone is over 1/1.1 ms
    with pytest.raises(ValueError):
        pb.bounds(1.0, 1.5, 0.1)
    assert pb.floor_ms(4 * 10**9, 4000.0) == pytest.approx(1.0)


def test_projection_chain_runs_every_linear_in_order(calls, cpu_route):
    from benchmarks import projection_bound as pb

    model = tiny_llama()
    chain = pb.ProjectionChain(model, batch=3)
    cfg = model.cfg
    assert [m.out_features for m in chain.modules[:7]] == [
        cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.hidden,
        cfg.intermediate, cfg.intermediate, cfg.hidden]
    assert len(chain.modules) == 7 * cfg.layers
    assert chain.weight_bytes == sum(m.weight.numel() * 4 for m in chain.modules)
    P.patch_linear(model)
    with torch.no_grad():
        out = chain.step()()
    P.unpatch_linear(model)
    assert calls.n == 7 * cfg.layers and out.shape == (3, 1, cfg.hidden)


def test_benchmark_headers_record_behaviour_variables(monkeypatch):
    from cudal2_testing.measure import env

    for name in env.BEHAVIOUR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDAL2_DISABLE_KERNELS", "1")
    monkeypatch.setenv("CUDAL2_UNRELATED", "x")
    assert env.cudal2_environment() == {"CUDAL2_DISABLE_KERNELS": "1"}
