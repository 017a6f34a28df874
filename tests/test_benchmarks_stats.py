"""CPU tests of the speedup statistics: geomean, wins/losses, -max over layouts, failures, roofline."""
import math

import pytest

from benchmarks import stats
from cudal2_testing.measure.summary import geomean, markdown_table


def row(shape, impl, layout, t, ok=True, mode="kernel", dtype="fp16"):
    m, n, k = shape
    r = {"m": m, "n": n, "k": k, "dtype": dtype, "impl": impl, "layout": layout, "mode": mode, "ok": ok}
    return r | ({"median_us": t, "mean_us": t * 1.1} if ok else {"error": "relative error too large"})


S1, S2, S3 = (64, 64, 64), (1024, 1024, 1024), (4096, 4096, 4096)


def test_geomean_markdown_table_and_aggregate():
    assert geomean([1.0, 4.0]) == pytest.approx(2.0) and geomean(x for x in (2.0, 8.0)) == pytest.approx(4.0)
    assert math.isnan(geomean([]))
    assert markdown_table(["a", "b"], [[1, "x"]]) == ["| a | b |", "|---|---|", "| 1 | x |"]
    agg = stats.aggregate([0.5, 0.99, 1.0, 2.0])
    assert agg["n"] == 4 and agg["wins"] == 1 and agg["losses"] == 1
    assert agg["min"] == 0.5 and agg["max"] == 2.0 and agg["median"] == pytest.approx(0.995)
    assert stats.aggregate([])["geomean"] is None


def test_max_takes_the_faster_layout_per_shape():
    rows = [row(S1, "cudal2", "nt", 10.0), row(S2, "cudal2", "nt", 10.0),
            row(S1, "cublas-nn", "nn", 12.0), row(S1, "cublas-tn", "nt", 15.0),
            row(S2, "cublas-nn", "nn", 30.0), row(S2, "cublas-tn", "nt", 20.0)]
    comp = stats.compare(rows, "kernel", "nt", "fp16")
    assert comp.speedups("cublas-max") == {S1: pytest.approx(1.2), S2: pytest.approx(2.0)}
    assert comp.speedups("cublas-nn")[S2] == pytest.approx(3.0)


def test_failures_are_excluded_and_counted():
    rows = [row(S1, "cudal2", "nn", 10.0), row(S2, "cudal2", "nn", 0, ok=False), row(S3, "cudal2", "nn", 5.0),
            row(S1, "torch", "nn", 20.0), row(S2, "torch", "nn", 20.0), row(S3, "torch", "nn", 0, ok=False),
            row(S1, "torch", "nt", 1.0),  # other layout: not a baseline of the NN comparison
            row(S1, "cublas-tn", "nt", 0, ok=False), row(S1, "cublas-nn", "nn", 5.0)]
    comp = stats.compare(rows, "kernel", "nn", "fp16")
    assert comp.speedups("torch") == {S1: pytest.approx(2.0)}
    assert comp.failures == {"cudal2": 1, "torch": 1, "cublas-tn": 1}
    assert comp.speedups("cublas-max") == {S1: pytest.approx(0.5)}  # the valid NN variant alone
    assert comp.summary("cublas-max")["losses"] == 1


def test_mode_dtype_and_stat_filters():
    rows = [row(S1, "cudal2", "nt", 10.0), row(S1, "torch", "nt", 20.0),
            row(S1, "cudal2", "nt", 10.0, mode="offline"), row(S1, "torch", "nt", 40.0, mode="offline"),
            row(S1, "cudal2", "nt", 10.0, dtype="bf16"), row(S1, "torch", "nt", 50.0, dtype="bf16")]
    assert stats.compare(rows, "offline", "nt", "fp16").speedups("torch")[S1] == pytest.approx(4.0)
    assert stats.compare(rows, "kernel", "nt", "bf16").speedups("torch")[S1] == pytest.approx(5.0)
    assert stats.compare(rows, "kernel", "nt", "fp16", stat="mean").speedups("torch")[S1] == pytest.approx(2.0)
    assert stats.groups(rows, "cudal2") == [("kernel", "nt", "bf16"), ("kernel", "nt", "fp16"),
                                            ("offline", "nt", "fp16")]


def test_autotune_sanity():
    rows = [row(S1, "cudal2", "nt", 1.0)]
    for s, h, a in ((S1, 10.0, 8.0), (S2, 10.0, 10.0)):
        rows += [row(s, "cublaslt-heuristic-nn", "nn", h), row(s, "cublaslt-heuristic-tn", "nt", h + 1),
                 row(s, "cublaslt-autotune-nn", "nn", a), row(s, "cublaslt-autotune-tn", "nt", a + 1)]
    sanity = stats.compare(rows, "kernel", "nt", "fp16").autotune_sanity()
    assert sanity["n"] == 2 and sanity["ok"] is True
    assert sanity["geomean_heuristic_over_autotune"] == pytest.approx(math.sqrt(1.25))


def test_noise_floor_compares_the_same_layout_autotune_with_its_repeat():
    rows = [row(S1, "cudal2", "nt", 10.0), row(S2, "cudal2", "nt", 10.0), row(S3, "cudal2", "nt", 10.0),
            row(S1, "cublaslt-autotune-tn", "nt", 9.0), row(S1, "cublaslt-autotune-tn-repeat", "nt", 10.0),
            row(S2, "cublaslt-autotune-tn", "nt", 10.0), row(S2, "cublaslt-autotune-tn-repeat", "nt", 10.0),
            row(S3, "cublaslt-autotune-tn", "nt", 10.0),
            row(S1, "cublaslt-autotune-nn", "nn", 1.0), row(S1, "cublaslt-autotune-nn-repeat", "nn", 2.0)]
    noise = stats.compare(rows, "kernel", "nt", "fp16").noise_floor()
    assert noise["n"] == 2 and noise["below"] == 1 and noise["geomean"] == pytest.approx(0.9 ** 0.5)
    assert noise["ours_below"] == 1  # S1: bar 9 us against ours 10 us; S3 has no repeat
    assert stats.compare(rows, "kernel", "nt", "fp16").speedups("cublaslt-autotune-tn-repeat") == {
        S1: pytest.approx(1.0), S2: pytest.approx(1.0)}
    assert stats.compare(rows[:3], "kernel", "nt", "fp16").noise_floor() == {"n": 0, "geomean": None, "below": 0,
                                                                                "ours_below": 0}


def test_by_route_splits_ours_by_what_it_ran_against_the_same_layout_bar():
    def ran(r, path, config=None):
        return r | {"ran": {"path": path} | ({"cublaslt_config": config} if config is not None else {})}

    S4, S5 = (8, 8, 8), (2, 2, 2)
    theirs, other = "algo_id=6 tile=24 stages=35", "algo_id=66 tile=24 stages=35"
    rows = [ran(row(S1, "cudal2", "nn", 8.0), "kernel"), ran(row(S2, "cudal2", "nn", 10.0), "cublaslt", theirs),
            ran(row(S3, "cudal2", "nn", 10.0), "cublaslt", other),
            ran(row(S4, "cudal2", "nn", 1.0), "cublaslt", theirs),
            row(S5, "cudal2", "nn", 1.0),
            row(S1, "cublaslt-autotune-nn", "nn", 10.0),
            ran(row(S2, "cublaslt-autotune-nn", "nn", 9.0), "cublaslt", [6, 24, 35]),
            ran(row(S3, "cublaslt-autotune-nn", "nn", 10.0), "cublaslt", [6, 24, 35]),
            row(S4, "cublaslt-autotune-nn", "nn", 1.0), row(S5, "cublaslt-autotune-nn", "nn", 1.0),
            ran(row(S4, "cublaslt-autotune-tn", "nt", 1.0), "cublaslt", [1, 1, 1])]  # not this layout's bar
    comp = stats.compare(rows, "kernel", "nn", "fp16")
    assert [comp.route(s) for s in (S1, S2, S3, S4, S5)] == [
        "kernel", "cublaslt, the bar's configuration", "cublaslt, another configuration", "cublaslt", None]
    routes = comp.by_route()
    assert set(routes) == {"kernel", "cublaslt, the bar's configuration", "cublaslt, another configuration", "cublaslt"}
    assert routes["kernel"]["n"] == 1 and routes["kernel"]["geomean"] == pytest.approx(1.25)
    assert routes["kernel"]["below"] == 0
    assert routes["cublaslt, the bar's configuration"]["geomean"] == pytest.approx(0.9)
    assert routes["cublaslt, the bar's configuration"]["below"] == 1
    assert routes["cublaslt, another configuration"]["n"] == 1 and routes["cublaslt"]["n"] == 1
    assert stats.compare(rows[:5], "kernel", "nn", "fp16").by_route() == {}  # no bar, no split


def test_lt_config_reads_both_forms_alike():
    assert stats.lt_config({"cublaslt_config": "algo_id=66 tile=24 custom=-1"}) == [66, 24, -1]
    assert stats.lt_config({"cublaslt_config": [66, 24, -1]}) == [66, 24, -1]
    assert stats.lt_config({"path": "kernel"}) is None

def test_roofline():
    # compute bound: 2 * 4096^3 flop at 1000 TFLOP/s = 137.4 us
    assert stats.roofline_floor_us(S3, 1000.0, 3000.0) == pytest.approx(2 * 4096**3 / 1e9)
    # memory bound: M=1 decode, bytes ~ 2 * K * N
    assert stats.roofline_floor_us((1, 4096, 4096), 1000.0, 1000.0) == pytest.approx(2 * (4096 + 4096**2 + 4096) / 1e6)
    effs = stats.roofline_efficiency([row(S3, "cudal2", "nt", 2 * 4096**3 / 1e9 * 2)], {"peak_tflops": 1000.0,
                                                                                       "bandwidth_gbs": 3000.0})
    assert effs[("cudal2", "nt", "kernel")]["median"] == pytest.approx(0.5)
