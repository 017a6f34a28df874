"""GPU tests of weight-prefetch plans (cudal2_ops.prefetch, csrc/weight_prefetch.h): the plan of a Llama stack, graphs
captured with a plan (eager and torch.compile'd layers) replaying bitwise like graphs without one while holding the
prefetch nodes, a capture that ends with a prefetch node, eager calls unchanged, training ignoring the plan.

Run: python -m pytest -q tests/gpu/test_prefetch_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import cudal2_ops
from benchmarks.llama_block import run_layers
from cudal2_ops.patch import patch_linear, unpatch_linear
from cudal2_ops.prefetch import clear_weight_prefetch, paused_weight_prefetch, plan_weight_prefetch
from test_patch_gpu import HALF, REL_TOL, decode_inputs, rel, tiny_llama

needs_extension = pytest.mark.skipif(not cudal2_ops.is_available(), reason="compiled extension not built")


@pytest.fixture(autouse=True)
def clean_patch():
    yield
    unpatch_linear()
    torch._dynamo.reset()


def nodes() -> int:
    return cudal2_ops._extension._C.weight_prefetch_nodes()


def capture(fn):
    """(graph, static output) of `fn` captured after three warm-up calls on a side stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def planned_llama(dtype, layers=2, batch=4, ctx=128):
    model = tiny_llama(dtype, layers=layers)
    inputs = decode_inputs(model, batch, ctx)
    patch_linear(model)
    plan = plan_weight_prefetch(model, lambda: model(*inputs))
    return model, inputs, plan


@needs_extension
@pytest.mark.parametrize("dtype", HALF)
def test_plan_of_a_llama_stack(dtype):
    model, _, plan = planned_llama(dtype)
    names = [tuple(n.rsplit(".", 1)[-1] for n in g) for g in plan.groups]
    assert names == [("q_proj", "k_proj", "v_proj"), ("o_proj",), ("gate_proj", "up_proj"), ("down_proj",)] * 2
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert plan.budget_bytes == l2 // 2 and plan.fractions[0] == 0.0
    assert all(f == min(1.0, plan.budget_bytes / b) for f, b in zip(plan.fractions[1:], plan.group_bytes[1:]))
    last = model.layers[-1].mlp.down_proj
    assert "_cudal2_prefetch" not in last.__dict__
    assert model.layers[0].mlp.down_proj._cudal2_prefetch.weights[0] is model.layers[1].self_attn.q_proj.weight


@needs_extension
@pytest.mark.parametrize("dtype, compiled", [(torch.float16, False), (torch.bfloat16, False), (torch.float16, True)])
def test_graph_with_plan_replays_like_graph_without(dtype, compiled):
    model, inputs, plan = planned_llama(dtype)
    h, cos, sin, caches = inputs
    layers = [torch.compile(layer, fullgraph=True) for layer in model.layers] if compiled else model.layers

    def step():
        return run_layers(layers, model.norm, h, cos, sin, caches)

    with torch.no_grad():
        eager_planned = model(*inputs)  # eager calls arm nothing: the plain GEMMs
        with paused_weight_prefetch(model):
            eager_plain = model(*inputs)
        before = nodes()
        planned_graph, planned_out = capture(step)
        during = nodes()
        with paused_weight_prefetch(model):
            plain_graph, plain_out = capture(step)
        after = nodes()
        h.copy_(torch.randn_like(h))
        planned_graph.replay()
        plain_graph.replay()
        fresh = model(*inputs)
    torch.cuda.synchronize()
    assert torch.equal(eager_planned, eager_plain)
    # warm-up calls are eager (they add nothing); the capture adds one prefetch node per planned gap
    assert during - before == sum(f > 0 for f in plan.fractions), (before, during)
    assert after == during, "a paused plan adds nothing"
    assert torch.equal(planned_out, plain_out), "a prefetch must not change any result"
    assert rel(planned_out, fresh) <= 2 * REL_TOL[dtype]


@needs_extension
def test_capture_ending_with_a_prefetch_node_is_valid():
    model, inputs, _ = planned_llama(torch.float16)
    h, cos, sin, caches = inputs
    first = model.layers[0]  # its down_proj prefetches layer 1's q/k/v, which this graph never reaches
    with torch.no_grad():
        before = nodes()
        graph, out = capture(lambda: first(h, cos, sin, caches[0]))
        added = nodes() - before
        ref = first(h, cos, sin, caches[0])
        graph.replay()
        graph.replay()
    torch.cuda.synchronize()
    assert added == 4 and torch.equal(out, ref)


@needs_extension
def test_training_with_a_plan_matches_without():
    model, inputs, _ = planned_llama(torch.bfloat16, layers=1)
    for p in model.parameters():
        p.requires_grad_(True)
    x = inputs[0].clone().requires_grad_()
    out = model(x, *inputs[1:3])  # prefill-style call without cache: autograd through the patched layers
    out.float().square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    clear_weight_prefetch(model)
    out2 = model(x, *inputs[1:3])
    out2.float().square().sum().backward()
    assert torch.equal(out, out2)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
