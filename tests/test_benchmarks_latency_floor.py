"""CPU tests of benchmarks.latency_floor: the problem set and order, floor fractions, the summary, options, and the
floor kernels' nvcc compile (the exported C symbols the benchmark calls through ctypes; reuse of a built library)."""
import subprocess

import pytest

from benchmarks import latency_floor as lf
from cudal2_testing.measure import shapes


def row(lt_us, tiny_us, move_us=2.0, empty_us=1.0, candidates=()):
    tiny = {"kernel": "tiny_k", "splits": 0, "us": tiny_us} if tiny_us else None
    return {"empty_us": empty_us, "move_us": move_us, "cublaslt_us": lt_us, "tiny": tiny,
            "tiny_candidates": [{"splits": splits, "us": us, "correct": correct} for splits, us, correct in candidates],
            "floor_fraction": {"cublaslt_of_empty": lf.floor_fraction(empty_us, lt_us),
                               "cublaslt_of_move": lf.floor_fraction(move_us, lt_us),
                               "tiny_of_empty": lf.floor_fraction(empty_us, tiny_us),
                               "tiny_of_move": lf.floor_fraction(move_us, tiny_us)}}


def test_problems_are_the_g1000_shapes_up_to_the_bound_smallest_first():
    todo = lf.problems(["nn", "nt"], ["fp16"], 26)
    small = [s for s in shapes.g1000() if s[0] * s[1] * s[2] <= 2**26]
    assert len(todo) == 2 * len(small) and len(set(todo)) == len(todo)
    assert todo[:2] == [("nn", "fp16", 64, 64, 64), ("nt", "fp16", 64, 64, 64)]
    volumes = [m * n * k for _, _, m, n, k in todo]
    assert volumes == sorted(volumes) and max(volumes) <= 2**26
    assert len(lf.problems(["nt"], ["fp16", "bf16"], 18)) == 2  # 64^3 = 2^18 only
    long_k = lf.problems(["nt"], ["fp16"], 26, min_k=2048)
    assert long_k and all(k >= 2048 for *_, k in long_k) and set(long_k) < set(lf.problems(["nt"], ["fp16"], 26))


def test_floor_fraction_and_summary():
    assert lf.floor_fraction(1.0, 4.0) == 0.25 and lf.floor_fraction(1.0, None) is None
    s = lf.summarize([row(4.0, 2.0), row(2.0, None), row(None, 8.0)])
    assert s["problems"] == 3
    assert s["cublaslt_of_empty"] == {"n": 2, "median": pytest.approx(0.375), "min": 0.25}
    assert s["tiny_of_move"] == {"n": 2, "median": pytest.approx(0.625), "min": 0.25}
    assert s["median_cublaslt_us"] == 3.0 and s["median_tiny_us"] == 5.0 and s["median_move_us"] == 2.0


def test_grid_wide_split_against_the_cluster_split():
    """Per problem the best grid-wide candidate (splits > 16) over the best cluster one (the automatic split 0
    included); wrong candidates and problems without both left out."""
    rows = [row(4.0, 2.0, candidates=[(0, 2.0, True), (16, 3.0, True), (32, 3.0, True), (64, 1.0, False)]),
            row(4.0, 2.0, candidates=[(8, 4.0, True), (64, 2.0, True)]),
            row(4.0, 2.0, candidates=[(8, 4.0, True)])]
    grid = lf.summarize(rows)["grid_of_cluster"]
    assert grid == {"n": 2, "geomean": pytest.approx(1.5 ** 0.5 * 0.5 ** 0.5), "min": 0.5, "max": 1.5,
                    "grid_faster": 1}
    assert lf.grid_of_cluster([row(4.0, 2.0)]) == {"n": 0}


def test_options():
    args = lf.parse_args(["--out", "x.json", "--layouts", "nt", "--dtypes", "fp16,bf16", "--max-log2-mnk", "20"])
    assert (args.layouts, args.dtypes, args.max_log2_mnk) == (["nt"], ["fp16", "bf16"], 20.0)
    for bad in (["--layouts", "tn"], ["--dtypes", "fp32"], ["--layouts", ""]):
        with pytest.raises(SystemExit):
            lf.parse_args(["--out", "x.json", *bad])


def test_floor_kernels_compile_and_export_the_ctypes_entry_points(tmp_path, kernel_toolchain):
    """nvcc builds the floor library for sm_90 (what the benchmark does on the GPU machine) with the two C symbols
    it calls; a second request reuses the built file."""
    library, seconds = lf.compile_floor_library((9, 0), tmp_path)
    assert library.exists() and seconds > 0 and library == lf.floor_library_path((9, 0), tmp_path)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    assert " floor_empty" in symbols and " floor_move" in symbols
    assert lf.compile_floor_library((9, 0), tmp_path) == (library, 0.0)
