"""GPU tests of kernel_after timing (a call after a non-GEMM kernel that writes its input, less that kernel's time):
a call that launches nothing measures about zero, a GEMM measures about what it costs back to back, and the benchmark
producer leaves A as it was (it rewrites the same values), and the benchmark runner writes kernel_after rows."""
from __future__ import annotations

import torch

from benchmarks import impls, runner
from cudal2_testing.measure import timing


def producer_and_sets(m=2048, n=2048, k=2048):
    gen = torch.Generator(device="cuda").manual_seed(0)
    inp = runner.make_inputs((m, n, k), torch.float16, gen)
    inp.prepare_producer()
    return inp


def test_a_call_that_launches_nothing_costs_about_nothing():
    inp = producer_and_sets()
    res = timing.after_kernel_mode(lambda i: None, lambda i: inp.produce(), 1, 0.01, target_ms=0.5)
    assert res["producer_us"] > 0.5, res  # an elementwise kernel over 4M halves
    assert abs(res["median_us"]) < 0.2 * res["producer_us"] + 0.5, res
    torch.cuda.synchronize()
    assert torch.equal(inp.a, inp.a_source)


def test_a_gemm_after_the_producer_costs_about_its_back_to_back_time():
    inp = producer_and_sets()

    def gemm(i: int) -> None:
        torch.matmul(inp.a, inp.b_kn, out=inp.out)

    est = timing.estimate_ms(gemm, 1)
    alone = timing.kernel_mode(gemm, 1, est, target_ms=1.0)["median_us"]
    after = timing.after_kernel_mode(gemm, lambda i: inp.produce(), 1, est, target_ms=1.0)["median_us"]
    assert 0.7 * alone < after < 1.5 * alone, (alone, after)


def test_runner_writes_kernel_after_rows():
    (torch_nn,) = [i for i in impls.build(["torch"], ["nn"])[0] if i.layout == "nn"]
    settings = runner.Settings(modes=("kernel", "kernel_after"), target_ms=0.2)
    todo = {("torch", "nn", "kernel"), ("torch", "nn", "kernel_after")}
    rows = runner.measure((256, 512, 128), "fp16", [torch_nn], todo, settings, l2_bytes=50 << 20)
    by_mode = {r["mode"]: r for r in rows}
    assert set(by_mode) == {"kernel", "kernel_after"} and all(r["ok"] for r in rows), rows
    assert by_mode["kernel_after"]["producer_us"] > 0 and by_mode["kernel_after"]["median_us"] > 0


def test_kernel_mode_times_a_shapes_implementations_in_rounds():
    torch_impls = impls.build(["torch"], ["nn", "nt"])[0]
    settings = runner.Settings(modes=("kernel",), target_ms=0.2)
    todo = {("torch", i.layout, "kernel") for i in torch_impls}
    rows = runner.measure((256, 512, 128), "fp16", torch_impls, todo, settings, l2_bytes=50 << 20)
    assert len(rows) == 2 and all(r["ok"] and r["samples"] == 5 * runner.INTERLEAVED_ROUNDS for r in rows), rows
    assert all(0 < r["median_us"] < 100 for r in rows), rows
