"""scripts/tune_grid.py's sweep-fed candidates: each problem's fastest kernels that beat the sweep's cuBLASLt-autotune
(CPU; the tuner then times them beside the table's kernel on the GPU)."""
import contextlib
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from cudal2_catalog.config import Knobs

REPO = Path(__file__).resolve().parent.parent


def load_tune_grid():
    spec = importlib.util.spec_from_file_location("tune_grid", REPO / "scripts" / "tune_grid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep(rows):
    env = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "capability": [9, 0], "cuda": "13.0"}
    return {"run_id": "s", "environment": env, "protocol": "p", "rows": rows}


def row(m, baseline_us, *candidates):
    return {"layout": "nt", "dtype": "fp16", "m": m, "n": 64, "k": 64, "baseline_us": baseline_us,
            "candidates": [{"kernel": k, "splits": s, "correct": ok, "us": us} for k, s, ok, us in candidates]}


def test_the_fastest_correct_kernels_under_the_baseline(tmp_path):
    tune_grid = load_tune_grid()
    path = tmp_path / "sweep.json.gz"
    path.write_bytes(gzip.compress(json.dumps(sweep([
        row(64, 10.0, ("a", 0, True, 9.0), ("b", 0, True, 8.0), ("c", 2, True, 7.0), ("d", 0, True, 6.0),
            ("wrong", 0, False, 1.0), ("slow", 0, True, 11.0)),
        row(128, 10.0, ("slow", 0, True, 10.5)),
    ])).encode()))
    found = tune_grid.sweep_kernels([path], top=3)
    assert found["nt_fp16_64_64_64"] == [("d", Knobs()), ("c", Knobs(splits=2)), ("b", Knobs())]
    assert set(found) == {"nt_fp16_64_64_64", "nt_bf16_64_64_64"}


def test_a_later_sweep_wins_per_problem(tmp_path):
    tune_grid = load_tune_grid()
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(sweep([row(64, 10.0, ("old", 0, True, 5.0))])))
    second.write_text(json.dumps(sweep([row(64, 10.0, ("new", 0, True, 6.0))])))
    assert tune_grid.sweep_kernels([first, second])["nt_fp16_64_64_64"] == [("new", Knobs())]
    assert tune_grid.sweep_kernels([]) == {}


def test_a_dtype_twin_gets_the_kernels_in_its_own_dtype_unless_swept(tmp_path):
    tune_grid = load_tune_grid()
    path = tmp_path / "sweep.json"
    bf16_row = {**row(128, 10.0, ("sm80_cute_bf16_nt_a", 0, True, 9.0)), "dtype": "bf16"}
    path.write_text(json.dumps(sweep([row(64, 10.0, ("sm80_cute_fp16_nt_b", 1, True, 9.0)),
                                      row(128, 10.0, ("sm80_cute_fp16_nt_c", 0, True, 9.0)), bf16_row,
                                      row(256, 10.0, ("sm80_cute_fp16_nt_d", 0, True, 9.0)),
                                      {**row(256, 10.0, ("slow", 0, True, 11.0)), "dtype": "bf16"}])))
    found = tune_grid.sweep_kernels([path])
    assert found["nt_bf16_64_64_64"] == [("sm80_cute_bf16_nt_b", Knobs(splits=1))]
    assert found["nt_bf16_128_64_64"] == [("sm80_cute_bf16_nt_a", Knobs())]  # swept in bf16: its own measurement
    assert found["nt_fp16_128_64_64"] == [("sm80_cute_fp16_nt_c", Knobs())]
    assert "nt_bf16_256_64_64" not in found  # swept in bf16 with nothing faster than cuBLASLt: no twin


def test_problems_up_to_the_grid_limit_time_every_kernel_and_knob_variant(monkeypatch):
    """--grid-up-to splits a size-sorted list into a "grid" part (every loaded kernel at each knob-grid variant) and a
    "table" part; the grid part's candidates include a tiny kernel's split variants beside its default knobs."""
    from cudal2_ops import tune

    tune_grid = load_tune_grid()
    small, large = tune.Problem("nt", "fp16", 64, 64, 4096), tune.Problem("nt", "fp16", 4096, 4096, 4096)
    assert tune_grid.modes_of([small, large], 24) == [("grid", [small]), ("table", [large])]
    assert tune_grid.modes_of([small, large], None) == [("table", [small, large])]
    tiny = "tiny_fp16_nt_32x32x64_s6_w8"
    monkeypatch.setattr(tune, "runnable_kernels", lambda layout, dtype, family=None: [tiny])
    grid = tune.kernel_candidates(small, "grid", None)
    assert grid[0] == (tiny, Knobs()) and len(grid) > 2 and {k.splits for _, k in grid[1:]} >= {8, 16}
    assert tune.kernel_candidates(small, "all", None) == [(tiny, Knobs())]
    assert tune.kernel_candidates(small, "none", None, [(tiny, Knobs(8))]) == []
    with pytest.raises(ValueError, match="kernel mode"):
        tune.kernel_candidates(small, "every", None)


def test_sweeps_of_another_gpu_add_their_kernels_to_a_problem(tmp_path):
    """Sweeps of one GPU merge (the later wins per problem); another GPU's winners join the problem's candidates."""
    tune_grid = load_tune_grid()
    h100, h200 = tmp_path / "h100.json", tmp_path / "h200.json"
    h100.write_text(json.dumps(sweep([row(64, 10.0, ("a", 0, True, 5.0))])))
    other = sweep([row(64, 10.0, ("b", 0, True, 6.0), ("a", 0, True, 7.0))])
    other["environment"] = {**other["environment"], "gpu_name": "NVIDIA H200"}
    h200.write_text(json.dumps(other))
    assert tune_grid.sweep_kernels([h100, h200])["nt_fp16_64_64_64"] == [("a", Knobs()), ("b", Knobs())]


def test_a_size_band_of_problems():
    tune_grid = load_tune_grid()
    from cudal2_ops import tune
    small, large = tune.Problem("nt", "fp16", 64, 64, 64), tune.Problem("nt", "fp16", 2048, 2048, 2048)
    assert [tune_grid.in_band(p, 18, None) for p in (small, large)] == [False, True]
    assert [tune_grid.in_band(p, None, 18) for p in (small, large)] == [True, False]
    assert [tune_grid.in_band(p, None, None) for p in (small, large)] == [True, True]
    assert not tune_grid.in_band(large, 18, 30)


def test_missing_only_tunes_what_the_base_lacks():
    """A tuning cut by its time budget is finished by tuning only the problems the base table has no entry for."""
    import argparse
    tune_grid = load_tune_grid()
    from cudal2_ops import tune
    have, lack = tune.Problem("nt", "fp16", 64, 64, 64), tune.Problem("nt", "fp16", 128, 64, 64)
    base = {have.key: {"cublaslt": {}}}
    args = argparse.Namespace(min_log2_mnk=None, max_log2_mnk=None, missing_only=True, sweep_problems_only=False)
    assert [tune_grid.wanted(p, args, base, {}) for p in (have, lack)] == [False, True]
    args.missing_only = False
    assert [tune_grid.wanted(p, args, base, {}) for p in (have, lack)] == [True, True]


def test_sweep_problems_only_tunes_the_finds():
    """With --sweep-problems-only a search's finds are re-tuned against the base entries and nothing else is."""
    import argparse
    tune_grid = load_tune_grid()
    from cudal2_ops import tune
    found, other = tune.Problem("nt", "fp16", 64, 64, 64), tune.Problem("nt", "fp16", 128, 64, 64)
    args = argparse.Namespace(min_log2_mnk=None, max_log2_mnk=None, missing_only=False, sweep_problems_only=True)
    extra = {found.key: [("sm90_tiny_fp16_nt_16x16x64_s8_w4", tune.DEFAULT_KNOBS)]}
    assert [tune_grid.wanted(p, args, {}, extra) for p in (found, other)] == [True, False]


def test_problems_from_tunes_only_the_listed_problems():
    """--problems-from (e.g. table_drift's losses) limits a run to the problems its file lists, within the band."""
    import argparse
    tune_grid = load_tune_grid()
    from cudal2_ops import tune
    listed, other = tune.Problem("nt", "fp16", 64, 64, 64), tune.Problem("nt", "fp16", 128, 64, 64)
    args = argparse.Namespace(min_log2_mnk=None, max_log2_mnk=None, missing_only=False, sweep_problems_only=False)
    assert [tune_grid.wanted(p, args, {}, {}, {listed.key}) for p in (listed, other)] == [True, False]
    assert [tune_grid.wanted(p, args, {}, {}, None) for p in (listed, other)] == [True, True]
    args.max_log2_mnk = 10
    assert not tune_grid.wanted(listed, args, {}, {}, {listed.key})

def test_a_search_stores_fastest_kernels_are_candidates_too(tmp_path):
    """A search store (plain or gzip) feeds the tuner like a sweep: per problem the fastest correct config kernels
    that beat the judge's cuBLASLt-autotune (the median of the problem's baselines)."""
    import statistics

    from build_tools.kernel_lib import select_kernel_names
    from search.candidate import Problem
    from search.loop import RunArgs, Search
    from search.simulate import SimulatedBackend
    from search.store import Store

    tune_grid = load_tune_grid()
    problems = [Problem("nt", "fp16", 1, 4096, 4096), Problem("nt", "fp16", 1024, 1024, 64)]
    path = tmp_path / "s.sqlite"
    store = Store(path)
    search = Search.start(store, SimulatedBackend(seed=0), RunArgs(policy="random", budget_evals=40, max_builds=0),
                          problems)
    search.run()
    expected = {}
    for p in problems:
        rows = [r for r in store.evaluations() if r["problem_key"] == p.key and r["status"] == "ok"]
        base = statistics.median(r["baseline_us"] for r in rows)
        fast = sorted((r["us"], store.candidate(r["candidate_id"])) for r in rows if r["us"] < base)
        kernels = list(dict.fromkeys((c.kernel_name, Knobs(*c.knobs)) for _, c in fast))[:2]
        if kernels:
            expected[p.key] = kernels
    store.close()
    assert expected, "the simulated search found nothing faster than its baseline: pick other problems"
    zipped = tmp_path / "s.sqlite.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    for source in (path, zipped):
        found = tune_grid.sweep_kernels([source], top=2)
        assert {k: v for k, v in found.items() if k in expected} == expected
        assert all(k.startswith("nt_bf16_") for k in set(found) - set(expected))   # the dtype twins
    missing = tmp_path / "missing.txt"
    with open(missing, "w") as out, contextlib.redirect_stdout(out):
        assert tune_grid.main(["--missing-kernels", "--sweeps", str(path)]) == 0
    named = {name for kernels in tune_grid.sweep_kernels([path]).values() for name, _ in kernels}
    assert missing.read_text().split() == sorted(named - set(select_kernel_names()))


def test_large_problems_time_the_found_kernels_at_every_knob_variant(monkeypatch):
    """--knobs-from: above that size the table's and the sweeps' kernels are timed at each variant of their knob
    grid (tune's "knobs" mode; the H200's largest problems gained 8% from swizzle alone), the rest as before."""
    from cudal2_ops import tune

    tune_grid = load_tune_grid()
    small, mid, large = (tune.Problem("nt", "fp16", s, s, s) for s in (64, 1024, 8192))
    assert tune_grid.modes_of([small, mid, large], 24, 36) == [("grid", [small]), ("table", [mid]),
                                                                ("knobs", [large])]
    assert tune_grid.modes_of([small, mid, large], None, 36) == [("table", [small, mid]), ("knobs", [large])]
    kernel = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent"
    other = "sm90_tma_ws_fp16_nt_128x128x64_s0_c1x2_pingpong_persistent"
    monkeypatch.setattr(tune, "runnable_kernels", lambda layout, dtype, family=None: [kernel, other])
    base = {"kernel": kernel, "splits": 0, "swizzle": 0, "raster": 0}
    found = tune.kernel_candidates(large, "knobs", base)
    assert found[0] == (kernel, Knobs()) and {k.swizzle for n, k in found if n == kernel} >= {1, 2, 4, 8}
    assert {n for n, _ in found} == {kernel}                     # only the table's kernel and the extra ones
    with_extra = tune.kernel_candidates(large, "knobs", base, [(other, Knobs(swizzle=2))])
    assert {n for n, _ in with_extra} == {kernel, other} and len(with_extra) > len(found)
    assert tune.kernel_candidates(large, "table", base) == [(kernel, Knobs())]


def test_a_size_bands_most_frequent_winners_are_timed_on_its_other_problems(tmp_path):
    tune_grid = load_tune_grid()
    path = tmp_path / "sweep.json.gz"
    k1, k2 = "sm90_fp16_nt_big", "sm90_fp16_nt_other"
    path.write_bytes(gzip.compress(json.dumps(sweep([
        row(64, 10.0, (k1, 0, True, 8.0)), row(65, 10.0, (k1, 0, True, 8.0), (k2, 0, True, 9.0)),
        row(66, 10.0, (k2, 0, True, 8.0)), row(2 ** 14, 10.0, ("sm90_fp16_nt_huge", 0, True, 9.0)),
    ])).encode()))
    winners = tune_grid.band_winners([path], top=1)
    assert winners[tune_grid.band_of(64, 64, 64)] == ["sm90_{dtype}_{layout}_big"]
    assert winners[tune_grid.band_of(2 ** 14, 64, 64)] == ["sm90_{dtype}_{layout}_huge"]
    from cudal2_ops.tune import Problem
    unmeasured = Problem("nn", "bf16", 96, 64, 64)
    extra = tune_grid.with_band_winners({"nn_bf16_96_64_64": [("mine", Knobs(swizzle=2))]}, [unmeasured], winners)
    assert extra[unmeasured.key] == [("mine", Knobs(swizzle=2)), ("sm90_bf16_nn_big", Knobs())]
    assert tune_grid.with_band_winners({}, [Problem("nt", "fp16", 2, 2, 2)], winners) == {"nt_fp16_2_2_2": []}


def test_parallel_tunings_merge_into_one_table_in_order(tmp_path, monkeypatch):
    tune_grid = load_tune_grid()
    first, second = tmp_path / "a.json.gz", tmp_path / "b.json"
    first.write_bytes(gzip.compress(json.dumps({"entries": {"x": 1, "y": 1}, "runs": [{"seconds": 2.0}]}).encode()))
    second.write_text(json.dumps({"entries": {"y": 2}, "runs": [{"seconds": 3.0}]}))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"header": {}, "entries": {"z": 0, "x": 0}}))
    written = {}
    monkeypatch.setattr(tune_grid.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_grid, "write", lambda args, base, entries, runs: written.update(
        base=base, entries=entries, runs=runs))
    assert tune_grid.main(["--merge", str(first), str(second), "--base", str(base), "--out", str(tmp_path / "t.json"),
                           "--results", str(tmp_path / "r.json")]) == 0
    assert written["entries"] == {"x": 1, "y": 2} and written["base"]["entries"] == {"z": 0, "x": 0}
    assert [r["seconds"] for r in written["runs"]] == [2.0, 3.0]
