"""CPU tests of cudal2_ops.prefetch: recording, grouping, budgets, attachment, the patched forward's use of the plan,
and the linear_prefetch op's CPU path, autograd guard and tracing.

Routing on CPU is made observable as in test_patch.py: `_route_dtype` accepts CPU fp32 (the GPU behaviour, placing
prefetch nodes in captured graphs, is tested in tests/gpu/test_prefetch_gpu.py).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cudal2_ops
from cudal2_ops import ops
from cudal2_ops import patch as P
from cudal2_ops import prefetch as PF

needs_extension = pytest.mark.skipif(not cudal2_ops.is_available(), reason="compiled extension not built")


@pytest.fixture
def cpu_route(monkeypatch):
    """CPU fp32 calls count as routed; cudal2 calls run F.linear and are counted by name."""
    seen = []
    monkeypatch.setattr(P, "_route_dtype", lambda x, w, b: x.dtype if x.dtype == torch.float32 else None)
    monkeypatch.setattr(cudal2_ops, "linear", lambda x, w, b=None: seen.append("linear") or F.linear(x, w, b))
    monkeypatch.setattr(ops, "linear_prefetch",
                        lambda x, w, b, pf, frac: seen.append(("prefetch", len(pf), frac)) or F.linear(x, w, b))
    yield seen
    P.unpatch_linear()


class Block(nn.Module):
    """q/k/v on one input, o on their mix, then gate/up on one input and down: the grouping of a decoder layer."""

    def __init__(self, d: int = 16, f: int = 48):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d // 2), nn.Linear(d, d // 2), nn.Linear(d, d)
        self.gate, self.up, self.down = nn.Linear(d, f), nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        h = x + self.o(q * torch.cat([k, v], -1))
        h2 = torch.tanh(h)
        return h + self.down(F.silu(self.gate(h2)) * self.up(h2))


def model_and_input(layers: int = 2) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(layers)]), torch.randn(3, 16)


def nbytes(*modules: nn.Linear) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in modules)


def test_group_calls_joins_consecutive_calls_on_one_input():
    calls = [PF.LinearCall(name, None, key) for name, key in
             (("q", 1), ("k", 1), ("v", 1), ("o", 2), ("g", 3), ("u", 3), ("d", 4), ("x", 1))]
    assert [[c.name for c in g] for g in PF.group_calls(calls)] == [["q", "k", "v"], ["o"], ["g", "u"], ["d"], ["x"]]
    assert PF.group_calls([]) == []


def test_plan_groups_a_decoder_and_attaches_the_next_groups_weights(cpu_route):
    model, x = model_and_input()
    P.patch_linear(model)
    budget = 4096
    plan = PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=budget)
    assert plan.groups == (("0.q", "0.k", "0.v"), ("0.o",), ("0.gate", "0.up"), ("0.down",),
                           ("1.q", "1.k", "1.v"), ("1.o",), ("1.gate", "1.up"), ("1.down",))
    b0, b1 = model[0], model[1]
    assert plan.group_bytes[:4] == (nbytes(b0.q, b0.k, b0.v), nbytes(b0.o), nbytes(b0.gate, b0.up), nbytes(b0.down))
    assert plan.fractions[0] == 0.0
    assert plan.fractions[1:] == tuple(min(1.0, budget / b) for b in plan.group_bytes[1:])
    assert plan.prefetched_bytes == sum(int(f * b) for f, b in zip(plan.fractions, plan.group_bytes))
    for owner, targets in ((b0.v, (b0.o,)), (b0.o, (b0.gate, b0.up)), (b0.down, (b1.q, b1.k, b1.v))):
        pf = owner._cudal2_prefetch
        assert [id(w) for w in pf.weights] == [id(t.weight) for t in targets]
        assert pf.fraction == min(1.0, budget / nbytes(*targets))
    assert "_cudal2_prefetch" not in b1.down.__dict__, "the step's last group has no successor"
    assert "_cudal2_prefetch" not in b0.q.__dict__ and "_cudal2_prefetch" not in b0.gate.__dict__
    assert all(k not in model.state_dict() for k in ("0.v._cudal2_prefetch",))
    assert not cpu_route or all(c == "linear" for c in cpu_route), "recording runs the plain routed path"


def test_plan_only_records_routed_calls_and_replaces_an_earlier_plan(cpu_route):
    model, x = model_and_input(layers=1)
    P.patch_linear(model, exclude=["0.o"])
    plan = PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
    assert ("0.o",) not in plan.groups and plan.fractions[1:] == (1.0,) * (len(plan.groups) - 1)
    P.patch_linear(model)
    plan = PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
    assert ("0.o",) in plan.groups and model[0].v._cudal2_prefetch.weights[0] is model[0].o.weight
    P.unpatch_linear(model)
    assert PF.plan_weight_prefetch(model, lambda: model(x)) == PF.PrefetchPlan((), (), (), 0), "nothing routed"


def test_a_layer_called_twice_gets_no_plan(cpu_route):
    torch.manual_seed(0)
    shared, other = nn.Linear(8, 8), nn.Linear(8, 8)
    model = nn.ModuleDict({"shared": shared, "other": other})
    P.patch_linear(model)
    x = torch.randn(2, 8)
    plan = PF.plan_weight_prefetch(model, lambda: shared(other(shared(x))), budget_bytes=1024)
    assert plan.groups == (("shared",), ("other",), ("shared",))
    assert plan.fractions == (0.0, 0.0, 1.0) and "_cudal2_prefetch" not in shared.__dict__
    assert other._cudal2_prefetch.weights == (shared.weight,)


def test_budget_must_be_positive(cpu_route):
    model, x = model_and_input(layers=1)
    P.patch_linear(model)
    with pytest.raises(ValueError, match="budget_bytes must be positive"):
        PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=0)


def test_patched_forward_uses_the_plan_only_when_no_gradient_is_needed(cpu_route):
    model, x = model_and_input(layers=1)
    P.patch_linear(model)
    PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
    cpu_route.clear()
    with torch.no_grad():
        ref = model(x)
    assert cpu_route.count(("prefetch", 1, 1.0)) == 2 and cpu_route.count(("prefetch", 2, 1.0)) == 1
    assert cpu_route.count("linear") == 4, "of the 7 layers, v, o and up carry a plan (down is the step's last)"
    cpu_route.clear()
    out = model(x)  # parameters require grad: training runs without the plan
    out.sum().backward()
    assert cpu_route == ["linear"] * 7 and torch.equal(out, ref)


def test_paused_and_cleared_plans(cpu_route):
    model, x = model_and_input(layers=1)
    P.patch_linear(model)
    PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
    planned = {n for n, m in model.named_modules() if "_cudal2_prefetch" in m.__dict__}
    assert planned == {"0.v", "0.o", "0.up"}
    with PF.paused_weight_prefetch(model):
        assert not any("_cudal2_prefetch" in m.__dict__ for m in model.modules())
    assert {n for n, m in model.named_modules() if "_cudal2_prefetch" in m.__dict__} == planned
    PF.clear_weight_prefetch(model)
    assert not any("_cudal2_prefetch" in m.__dict__ for m in model.modules())


def test_swapped_layers_carry_plans(cpu_route):
    model, x = model_and_input(layers=1)
    P.swap_linear(model)
    PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
    cpu_route.clear()
    with torch.no_grad():
        model(x)
    assert sum(isinstance(c, tuple) for c in cpu_route) == 3


@needs_extension
def test_linear_prefetch_op_on_cpu_is_f_linear_and_refuses_backward():
    torch.manual_seed(0)
    x, w, b, other = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6), torch.randn(5, 6)
    out = torch.ops.cudal2.linear_prefetch(x, w, b, [other], 0.5)
    assert torch.equal(out, F.linear(x, w, b))
    assert torch.equal(ops.linear_prefetch(x, w, None, (other,), 1.0), F.linear(x, w))
    xg = x.clone().requires_grad_()
    with pytest.raises(RuntimeError):
        torch.ops.cudal2.linear_prefetch(xg, w, b, [other], 0.5).sum().backward()


@needs_extension
def test_plan_traces_into_one_graph(monkeypatch):
    monkeypatch.setattr(P, "_route_dtype", lambda x, w, b: x.dtype if x.dtype == torch.float32 else None)
    model, x = model_and_input(layers=1)
    P.patch_linear(model)
    try:
        PF.plan_weight_prefetch(model, lambda: model(x), budget_bytes=1 << 20)
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        with torch.no_grad():
            ref = model(x)
            out = torch.compile(model, backend=backend, fullgraph=True)(x)
        assert len(graphs) == 1 and graphs[0].code.count("cudal2.linear_prefetch") == 3, graphs[0].code
        assert torch.allclose(out, ref)
    finally:
        P.unpatch_linear(model)
        torch._dynamo.reset()
