"""CPU tests of the report: CSV, markdown (Table 1 layout), summary.json schema and merging, PNG plots, all on a
synthetic results file."""
import csv
import gzip
import json
import random

import pytest

from benchmarks import impls, report, results, stats
from cudal2_testing.measure import shapes

MODES = ("kernel", "offline", "server")


def synthetic_doc(seed=0, fail=(), n_shapes=24, modes=MODES):
    """A results document with every implementation in every mode for a stratified sample of G1000; cudal2 is
    1.1x faster than every baseline except where listed in `fail` as (impl, layout, shape index)."""
    rng = random.Random(seed)
    sample = shapes.stratified_sample(shapes.g1000(), n_shapes, seed)
    rows = []
    for i, (m, n, k) in enumerate(sample):
        base_t = 5.0 + stats.roofline_floor_us((m, n, k), 800.0, 3000.0)
        entries = [(name, lay) for name in impls.LAYOUT_FOLLOWING for lay in ("nt", "nn")]
        entries += list(impls.FIXED_LAYOUT.items())
        for name, lay in entries:
            for mode in modes:
                r = {"m": m, "n": n, "k": k, "dtype": "fp16", "impl": name, "layout": lay, "mode": mode}
                if (name, lay, i) in fail:
                    rows.append(r | {"ok": False, "rel_err": 0.5, "error": "relative error 5.000e-01 > 1e-03"})
                    continue
                t = base_t * (1.0 if name == "cudal2" else 1.1) * rng.uniform(0.999, 1.001)
                rows.append(r | {"ok": True, "rel_err": 1e-4, "median_us": t, "mean_us": t, "std_us": 0.0,
                                 "min_us": t, "samples": 5})
    header = {"gpu": "Test GPU", "gpu_slug": "test-gpu", "sm_count": 132, "l2_bytes": 50 * 2**20,
              "nvidia_smi": {}, "cuda": "13.0", "torch": "2.x", "cublas": "13.0.0", "cutlass": None,
              "package": "0.0.0", "commit": "abc123", "date": "2026-01-01T00:00:00+00:00",
              "command": "python -m benchmarks.grid --sample 24", "wall_s": 12.5,
              "roofline": {"peak_tflops": 800.0, "peak_source": "x", "bandwidth_gbs": 3000.0, "bandwidth_source": "y"}}
    protocol = {"shapes": f"g1000-sample{n_shapes}", "n_shapes": n_shapes, "l2": "warm", "seed": seed,
                "unavailable": {}}
    doc = results.new_document(header, protocol)
    doc["rows"] = rows
    return doc


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "test-gpu" / "g1000-sample24_nt-nn_fp16_all_warm.json"
    results.save(path, synthetic_doc(fail={("cudal2", "nt", 0), ("cublas-tn", "nt", 1)}))
    return path


def test_report_writes_every_file(tmp_path):
    run_file = tmp_path / "kernel_only.json"
    results.save(run_file, synthetic_doc(modes=("kernel",)))
    written = report.make_report(run_file)
    names = {p.name for p in written}
    assert run_file.with_suffix(".csv").name in names and run_file.with_suffix(".md").name in names
    assert "summary.json" in names
    pngs = [p for p in written if p.suffix == ".png"]
    assert len(pngs) == 2 + 1  # speedup per layout + roofline
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_gzipped_run_reports_as_its_plain_self(tmp_path):
    """The results folders keep runs as .json.gz: the report reads them and names its files after the run."""
    plain, zipped = tmp_path / "plain" / "run.json", tmp_path / "zipped" / "run.json"
    results.save(plain, synthetic_doc(modes=("kernel",)))
    zipped.parent.mkdir()
    zipped.with_name("run.json.gz").write_bytes(gzip.compress(plain.read_bytes()))
    report.make_report(plain, plot=False, update_summary=False)
    written = report.make_report(zipped.with_name("run.json.gz"), plot=False, update_summary=False)
    assert [p.name for p in written] == ["run.csv", "run.md"]
    assert zipped.with_suffix(".md").read_text() == plain.with_suffix(".md").read_text()


def test_csv_has_every_row(run_file):
    report.make_report(run_file, plot=False)
    with open(run_file.with_suffix(".csv")) as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == len(results.load(run_file)["rows"])
    assert {"floor_us", "roofline_pct"} <= set(lines[0])


def test_markdown_has_table1_buckets_and_failures(run_file):
    report.make_report(run_file, plot=False)
    md = run_file.with_suffix(".md").read_text()
    assert "### Table 1 (offline / server)" in md
    assert "| baseline | offline mean | offline median | offline std | offline wins | server mean |" in md
    for b in stats.BASELINES:
        assert f"| {b} |" in md
    assert "log2 MNK 40-43" in md and "## Roofline efficiency" in md
    assert "6 failed rows" in md  # 2 failing (impl, layout, shape) x 3 modes


def test_markdown_lists_rows_timed_alone():
    from benchmarks import markdown
    row = {"impl": "cudal2", "layout": "nt", "dtype": "fp16", "mode": "kernel", "m": 12288, "n": 12288, "k": 12288,
           "ok": True}
    lines = markdown.failures([row, {**row, "impl": "torch"}, {**row, "timed_alone": True}])
    assert lines[0] == "0 failed rows (excluded from every aggregate)."
    assert "1 kernel rows timed alone" in lines[2] and lines[3:] == ["- cudal2 nt fp16 M=12288 N=12288 K=12288"]
    assert markdown.failures([row]) == ["0 failed rows (excluded from every aggregate)."]


def test_summary_schema_and_values(run_file):
    report.make_report(run_file, plot=False)
    summ = json.loads(run_file.with_name("summary.json").read_text())
    assert {"gpu", "commit", "date", "runs"} <= set(summ)
    assert len(summ["runs"]) == 2 * len(MODES)
    for entry in summ["runs"]:
        assert {"mode", "layout", "dtype", "shapes", "n", "wall_s", "source", "vs", "sanity"} <= set(entry)
        assert entry["shapes"] == "g1000-sample24" and entry["source"] == run_file.name
        assert set(entry["vs"]) == set(stats.BASELINES)
        for agg in entry["vs"].values():
            assert set(agg) == {"geomean", "mean", "median", "min", "max", "wins", "losses"}
            assert agg["geomean"] == pytest.approx(1.1, rel=3e-3) and agg["losses"] == 0
    nt_kernel = next(e for e in summ["runs"] if (e["layout"], e["mode"]) == ("nt", "kernel"))
    assert nt_kernel["n"] == 23 and nt_kernel["failures"] == {"cublas-tn": 1, "cudal2": 1}
    assert nt_kernel["vs"]["cublas-tn"]["wins"] == 22 and nt_kernel["vs"]["cublas-max"]["wins"] == 23
    assert nt_kernel["sanity"]["ok"] is True


def test_summary_merge_replaces_same_key_and_keeps_others(run_file, tmp_path):
    report.make_report(run_file, plot=False)
    other = run_file.with_name("llm_nt_fp16_kernel_warm.json")
    doc = synthetic_doc(seed=1)
    doc["protocol"]["shapes"] = "llm"
    results.save(other, doc)
    report.make_report(other, plot=False)
    report.make_report(run_file, plot=False)
    runs = json.loads(run_file.with_name("summary.json").read_text())["runs"]
    keys = [(r["mode"], r["layout"], r["dtype"], r["shapes"]) for r in runs]
    assert len(keys) == len(set(keys)) == 4 * len(MODES)


def test_markdown_names_the_table_the_dispatcher_loaded():
    """A results file says which table cudal2 ran with (or that none loaded), so a run without it cannot pass as one
    with it."""
    from benchmarks import markdown
    assert markdown.dispatch_table_line({}) == "cudal2's table: not recorded"
    assert "none loaded" in markdown.dispatch_table_line({"table": None})
    line = markdown.dispatch_table_line({"table": {"path": "t.json", "entries": 5, "entries_sha256": "ab12",
                                                   "tuned_overlay": None}})
    assert line == "cudal2's table: t.json (5 entries, digest ab12)"


def test_kernel_after_rows_get_their_own_section(tmp_path):
    """kernel_after (a call after a non-GEMM kernel) is reported as a mode of its own beside kernel mode."""
    path = tmp_path / "test-gpu" / "after.json"
    results.save(path, synthetic_doc(modes=("kernel", "kernel_after")))
    report.main([str(path)])
    md = path.with_suffix(".md").read_text()
    assert "### kernel mode" in md and "### kernel_after mode" in md


def test_figures_are_saved_as_palette_pngs(tmp_path):
    """Results folders keep figures as 256-colour palette PNGs (a third of matplotlib's RGBA size)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from cudal2_testing.measure.figures import save_png

    fig, ax = plt.subplots()
    ax.plot(range(100), [x * x for x in range(100)], "o-")
    save_png(fig, tmp_path / "f.png")
    plt.close(fig)
    with Image.open(tmp_path / "f.png") as image:
        assert image.mode == "P" and image.format == "PNG" and image.size[0] > 100


def test_markdown_splits_cudal2_by_what_it_ran(tmp_path):
    doc = synthetic_doc(modes=("kernel",))
    for r in doc["rows"]:
        if r["impl"] == "cudal2":
            r["ran"] = {"path": "kernel" if r["m"] * r["n"] * r["k"] < 2 ** 30 else "cublaslt"}
    small = sum(r["impl"] == "cudal2" and r["layout"] == "nt" and r["m"] * r["n"] * r["k"] < 2 ** 30
                for r in doc["rows"])
    path = tmp_path / "test-gpu" / "routes.json"
    results.save(path, doc)
    report.make_report(path, plot=False)
    line = next(x for x in path.with_suffix(".md").read_text().splitlines() if x.startswith("By what cudal2 ran"))
    assert f"cublaslt 1.100 over {24 - small} shapes, 0 below 0.97; kernel 1.100 over {small} shapes" in line
