"""CPU tests of the grid runner's pure parts: options, run names, resume bookkeeping, implementation registry,
results files and timing arithmetic."""
import pytest
import torch

from benchmarks import grid, impls, results, runner
from cudal2_testing import lt_baseline
from cudal2_testing.measure import timing


def test_parse_args_defaults_and_lists():
    args = grid.parse_args([])
    assert args.shapes == "g1000" and args.layouts == ["nt", "nn"] and args.dtypes == ["fp16"]
    assert args.modes == ["kernel", "offline"] and args.l2 == "warm" and args.impls == list(impls.DEFAULT)
    assert impls.SHIPPED in impls.ALL and impls.SHIPPED not in args.impls   # a diagnostic: run only when named
    args = grid.parse_args(["--shapes", "llm", "--sample", "50", "--modes", "server", "--impls", "torch,cublas-nn"])
    assert args.sample == 50 and args.modes == ["server"] and args.impls == ["torch", "cublas-nn"]
    assert grid.run_name(args) == "llm-sample50_nt-nn_fp16_server_warm"
    with pytest.raises(SystemExit):
        grid.parse_args(["--layouts", "tt"])


def test_below_mnk_log2_limits_and_labels_the_shape_set():
    """The small-problem subsets of the issues: G1000 has 379 shapes with M*N*K < 2^30 and 539 below 2^32."""
    assert len(grid.select_shapes(grid.parse_args([]))) == 1000
    for bits, count in ((30, 379), (32, 539)):
        args = grid.parse_args(["--below-mnk-log2", str(bits), "--modes", "offline"])
        chosen = grid.select_shapes(args)
        assert len(chosen) == count and all(m * n * k < 2 ** bits for m, n, k in chosen)
        assert grid.run_name(args) == f"g1000-below2pow{bits}_nt-nn_fp16_offline_warm"


def test_problems_from_keeps_the_listed_shapes_of_the_requested_layouts_and_dtypes(tmp_path):
    listed = tmp_path / "losses.txt"
    listed.write_text("nn_bf16_1024_4096_64\nnt_fp16_128_1024_16384\nnt_fp16_7_7_7\n")
    args = grid.parse_args(["--problems-from", str(listed), "--dtypes", "fp16,bf16", "--modes", "kernel"])
    assert sorted(grid.select_shapes(args)) == [(128, 1024, 16384), (1024, 4096, 64)]   # not 7x7x7: not in G1000
    assert grid.run_name(args) == "g1000-listed_nt-nn_fp16-bf16_kernel_warm"
    only_fp16 = grid.parse_args(["--problems-from", str(listed), "--dtypes", "fp16"])
    assert grid.select_shapes(only_fp16) == [(128, 1024, 16384)]   # the bf16 key names a dtype not requested
    assert grid.select_shapes(grid.parse_args(["--problems-from", str(listed), "--layouts", "nn"])) == []


def test_todo_skips_done_rows():
    impl_list, _ = impls.build(["torch"], ["nt", "nn"])
    done = {(64, 64, 64, "fp16", "torch", "nt", "kernel")}
    todo = grid.todo_for((64, 64, 64), "fp16", impl_list, ["kernel", "offline"], done)
    assert todo == {("torch", "nn", "kernel"), ("torch", "nt", "offline"), ("torch", "nn", "offline")}


def test_impl_registry():
    built, unavailable = impls.build(list(impls.ALL), ["nt"])
    names = {i.name for i in built} | set(unavailable)
    assert names == set(impls.ALL)
    assert {(i.name, i.layout) for i in built if i.name == "torch"} == {("torch", "nt")}
    for i in built:
        if i.name in impls.FIXED_LAYOUT:
            assert i.layout == impls.FIXED_LAYOUT[i.name]
    with pytest.raises(ValueError):
        impls.build(["cublas"], ["nt"])


def test_results_roundtrip_and_keys(tmp_path):
    doc = results.new_document({"gpu": "x"}, {"modes": ["kernel"]})
    doc["rows"] = [{"m": 1, "n": 2, "k": 3, "dtype": "fp16", "impl": "torch", "layout": "nt", "mode": "kernel",
                    "ok": True, "median_us": 1.5}]
    path = tmp_path / "a" / "run.json"
    results.save(path, doc)
    assert results.load(path) == doc
    assert results.row_key(doc["rows"][0]) == (1, 2, 3, "fp16", "torch", "nt", "kernel")


def test_timing_arithmetic():
    assert timing.calls_per_replay(0.01, 1.0, 256, 1) == 100
    assert timing.calls_per_replay(0.0001, 1.0, 256, 1) == 256
    assert timing.calls_per_replay(5.0, 1.0, 256, 1) == 1
    assert timing.calls_per_replay(0.01, 1.0, 4096, 700) == 700  # a cold run visits every input set
    assert timing.host_iterations(0.01, budget_ms=30, min_iters=5, max_iters=30) == 30
    assert timing.host_iterations(20.0, budget_ms=30, min_iters=5, max_iters=30) == 5
    s = timing.summarize_us([1.0, 2.0, 6.0])
    assert s == {"median_us": 2.0, "mean_us": 3.0, "std_us": pytest.approx(2.160, abs=1e-3), "min_us": 1.0,
                 "samples": 3}


def test_cold_set_count_exceeds_twice_l2():
    l2 = 50 * 2**20
    for shape in [(64, 64, 64), (1024, 1024, 1024), (16384, 16384, 16384)]:
        n = runner.cold_set_count(shape, l2, cap=10**6)
        assert n >= 2 and n * runner.touched_bytes(shape) > 2 * l2


def test_gpu_slug_and_cutlass_version():
    import importlib.metadata

    from cudal2_testing.measure import env

    assert env.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
    assert env.gpu_slug("NVIDIA H200") == "nvidia_h200"
    try:
        installed = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    assert env.cutlass_version() == installed


def test_a_results_file_is_continued_only_in_the_setting_it_was_measured_in():
    """A run resumed without the table it started with (or on another GPU, commit, PDL setting) would mix two runs."""
    table = {"path": "OUT/nvidia_h200.json", "entries": 5164, "entries_sha256": "abc", "tuned_overlay": None}
    head = {"gpu": "NVIDIA H200", "sm_count": 132, "commit": "87757c0", "pdl_disabled": True,
            "cudal2_environment": {"CUDAL2_TABLE": "OUT/nvidia_h200.json"}, "table": table, "date": "then"}
    assert results.resume_conflicts(head, {**head, "date": "now"}) == []
    conflicts = results.resume_conflicts(head, {**head, "table": None})
    assert len(conflicts) == 1 and conflicts[0].startswith("table:")
    assert len(results.resume_conflicts(head, {**head, "pdl_disabled": False, "commit": "other"})) == 2


def test_kernel_after_is_a_mode():
    args = grid.parse_args(["--modes", "kernel,kernel_after"])
    assert args.modes == ["kernel", "kernel_after"] and "kernel_after" in runner.GRAPH_MODES


def test_a_run_told_to_measure_a_table_refuses_to_measure_without_it(tmp_path):
    """CUDAL2_TABLE names the table to measure; a run whose dispatcher did not load it (missing file, another GPU's)
    would measure cuBLASLt's heuristic under the table's name."""
    table = tmp_path / "t.json"
    loaded = {"table": {"path": str(table), "entries": 1, "entries_sha256": "x", "tuned_overlay": None}}
    assert results.table_request_unmet(loaded, str(table)) is None
    assert results.table_request_unmet({"table": None}, None) is None
    assert "loaded no table" in results.table_request_unmet({"table": None}, str(table))
    assert "loaded" in results.table_request_unmet(loaded, str(tmp_path / "other.json"))


def test_a_kernel_row_says_what_the_implementation_ran():
    """cudal2's dispatch decision and the bar's chosen configuration go into the row, so that a loss between two runs
    of one configuration (noise) can be told from a different choice; an implementation that cannot say adds nothing."""
    inp = runner.Inputs(torch.zeros(2, 3), torch.zeros(3, 4), torch.zeros(4, 3), torch.zeros(2, 4))
    bar = lt_baseline.AutotunedLt("nt")
    described = impls.Impl("cublaslt-autotune-tn", "nt", bar, bar.describe)
    assert runner.ran_of(described, inp) == {}                     # before its first call: nothing chosen yet
    bar.chosen[bar.key(inp.a, inp.b("nt"))] = [66, 20, 35, 1, 0, 0, 1, 0, 3]
    assert runner.ran_of(described, inp) == {"ran": {"path": "cublaslt", "cublaslt_config": [66, 20, 35, 1, 0, 0, 1,
                                                                                               0, 3]}}
    assert runner.ran_of(impls.Impl("torch", "nt", lambda a, b, out: out), inp) == {}

    def broken(a, b, out):
        raise RuntimeError("no dispatcher")
    assert runner.ran_of(impls.Impl("cudal2", "nt", lambda a, b, out: out, broken), inp) == {
        "ran": {"error": "RuntimeError: no dispatcher"}}


def test_the_shipped_choice_is_an_exact_table_hits_cublaslt_configuration():
    """cudal2-shipped runs a problem's table configuration as shipped only where cudal2 runs the table's cuBLASLt
    choice for an exact hit; a kernel, a nearest-M rule's choice or a miss are cudal2's own call (None)."""
    from cudal2_ops import tables
    fields = dict(zip(tables.LT_CONFIG_FIELDS, range(1, 10)))
    entries = {"nt_fp16_8_64_64": {"cublaslt": fields, "cublaslt_near": [{"cublaslt": dict(fields, tile=7)}]}}
    hit = {"path": "cublaslt", "cublaslt_policy": "table"}
    assert impls.shipped_config(hit, entries, "nt_fp16_8_64_64") == list(range(1, 10))
    assert impls.shipped_config(dict(hit, tuned_m=16), entries, "nt_fp16_8_64_64") is None
    assert impls.shipped_config({"path": "kernel"}, entries, "nt_fp16_8_64_64") is None
    assert impls.shipped_config({"path": "cublaslt", "cublaslt_policy": "heuristic"}, entries, "x") is None
