"""CPU tests of the decode bandwidth report's pure parts: bytes and % arithmetic, cold sets, problem selection and
order, summary statistics, target verdicts, markdown, options."""
import pytest
import torch

from benchmarks import decode_bandwidth as db
from cudal2_testing.measure import cold_l2, shapes

M16 = 16 * 2**20
KERNEL = "decode_fp16_nt_8x128x64_s4_w8"


def cand(us, pct, correct=True, **extra):
    return {"err": 1e-4, "correct": correct, "us": us if correct else None, "pct": pct if correct else None, **extra}


def row(m, n, k, decode_pct, auto_pct, heur_pct=50.0, dtype="fp16", cudal2_pct=None):
    """A measured row: times are derived from the percentages (us = 100 / pct), so faster means higher %; no cudal2
    figure unless `cudal2_pct` (as in runs before cudal2 was measured)."""
    best = None if decode_pct is None else cand(100 / decode_pct, decode_pct, kernel=KERNEL, splits=4)
    auto = None if auto_pct is None else cand(100 / auto_pct, auto_pct)
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": "nt", "bytes": cold_l2.bytes_per_call(m, n, k),
            "sets": 8, "cold_bytes": 8 * cold_l2.bytes_per_call(m, n, k), "decode": [best] if best else [], "rejected": 0,
            "cublaslt": {"heuristic": cand(100 / heur_pct, heur_pct), "autotune": auto}, "best": best,
            "speedup_vs_autotune": auto["us"] / best["us"] if best and auto else None,
            **({"cudal2": cand(100 / cudal2_pct, cudal2_pct)} if cudal2_pct else {})}


def test_bytes_and_percent():
    assert cold_l2.bytes_per_call(1, 4096, 4096) == 2 * (4096 + 4096 * 4096 + 4096)
    assert cold_l2.bytes_per_call(64, 512, 3584, element_bytes=4) == 4 * (64 * 3584 + 512 * 3584 + 64 * 512)
    assert db.pct_of_bandwidth(4_000_000, 1.0, 4000.0) == pytest.approx(100.0)  # 4 MB in 1 us = 4000 GB/s
    assert db.pct_of_bandwidth(2_000_000, 1.0, 4000.0) == pytest.approx(50.0)
    assert db.pct_of_bandwidth(4_000_000, 2.0, 1000.0) == pytest.approx(200.0)


def test_cold_sets_exceed_the_factor_times_l2():
    l2 = 60 * 2**20
    for m, n, k in [(1, 512, 3584), (64, 4096, 4096), (1, 29568, 8192)]:
        nbytes = cold_l2.bytes_per_call(m, n, k)
        count = cold_l2.cold_set_count(nbytes, l2)
        assert count >= 2 and count * nbytes > cold_l2.COLD_FACTOR * l2
        assert (count - 1) * nbytes <= cold_l2.COLD_FACTOR * l2 or count == 2
    assert cold_l2.cold_set_count(100, l2) == cold_l2.MAX_SETS
    assert cold_l2.cold_set_count(10 * l2, l2) == 2


def test_spread():
    items = list(range(9))
    assert db.spread(items, None) == items and db.spread(items, 9) == items and db.spread(items, 20) == items
    assert db.spread(items, 3) == [1, 4, 7]
    assert db.spread(items, 1) == [4]
    picked = db.spread(list(range(161)), 10)
    assert len(set(picked)) == 10 and picked == sorted(picked) and picked[0] < 16 and picked[-1] > 144


def test_spread_order_prefixes_cover_the_range():
    assert db.spread_order(8) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert db.spread_order(1) == [0] and db.spread_order(2) == [0, 1]
    order = db.spread_order(161)
    assert sorted(order) == list(range(161))
    quarter = order[:40]
    assert min(quarter) < 10 and max(quarter) > 150
    assert max(b - a for a, b in zip(sorted(quarter), sorted(quarter)[1:])) <= 8


def test_problems_are_llm_decode_shapes_with_dtypes_together():
    decode_shapes = [s for s in shapes.llm() if s[0] <= 64]
    todo = db.problems(["fp16", "bf16"], None)
    assert len(todo) == 2 * len(decode_shapes)
    assert {p[:3] for p in todo} == set(decode_shapes) and all(p[0] <= db.MAX_M for p in todo)
    assert all(todo[i][:3] == todo[i + 1][:3] and (todo[i][3], todo[i + 1][3]) == ("fp16", "bf16")
               for i in range(0, len(todo), 2))
    limited = db.problems(["bf16"], 12)
    assert len(limited) == 12 and {p[3] for p in limited} == {"bf16"}
    assert {p[:3] for p in limited} == set(db.spread(decode_shapes, 12))
    large = db.problems(["fp16"], None, min_nk=16 * 2**20)
    assert {p[:3] for p in large} == {s for s in decode_shapes if s[1] * s[2] >= 16 * 2**20} and len(large) < len(decode_shapes)


def test_fastest_ignores_incorrect_and_untimed():
    cands = [cand(5.0, 80, kernel="a"), cand(3.0, 90, correct=False, kernel="b"), cand(4.0, 85, kernel="c"),
             {"kernel": "d", "err": 1e-4, "correct": True}]
    assert db.fastest(cands)["kernel"] == "c"
    assert db.fastest([cands[1]]) is None and db.fastest([]) is None


def test_summary_statistics_and_head_to_head():
    rows = [row(1, 4096, 4096, 90.0, 60.0), row(8, 4096, 4096, 70.0, 80.0),       # N*K = 16M: small subset
            row(1, 14336, 4096, 95.0, 92.0), row(64, 28672, 4096, 88.0, 90.0)]
    s = db.summarize(rows)
    assert s["problems"] == {"all": 4, "nk_le_16m": 2}
    assert s["decode"]["all"] == {"n": 4, "missing": 0, "median": pytest.approx(89.0), "min": 70.0}
    assert s["decode"]["nk_le_16m"] == {"n": 2, "missing": 0, "median": pytest.approx(80.0), "min": 70.0}
    assert s["cublaslt_autotune"]["all"]["median"] == pytest.approx(85.0)
    assert s["cublaslt_autotune"]["nk_le_16m"]["min"] == 60.0
    assert s["cublaslt_heuristic"]["all"]["median"] == pytest.approx(50.0)
    h = s["vs_cublaslt_autotune"]
    assert h["compared"] == 4 and h["decode_wins"] == 2
    ratios = [90 / 60, 70 / 80, 95 / 92, 88 / 90]
    assert h["geomean_speedup"] == pytest.approx((ratios[0] * ratios[1] * ratios[2] * ratios[3]) ** 0.25)


def test_target_verdicts():
    met = db.summarize([row(1, 4096, 4096, 90.0, 60.0), row(1, 14336, 4096, 86.0, 92.0)])
    assert [t["met"] for t in met["targets"]] == [True, True]
    assert met["targets"][0]["value"] == pytest.approx(88.0) and met["targets"][1]["value"] == 90.0
    low_small = db.summarize([row(1, 1024, 4096, 45.0, 60.0), row(1, 14336, 4096, 99.0, 92.0),
                              row(4, 14336, 4096, 99.0, 92.0)])
    assert [t["met"] for t in low_small["targets"]] == [True, False]
    low_median = db.summarize([row(1, 1024, 4096, 60.0, 60.0), row(1, 14336, 4096, 80.0, 92.0)])
    assert [t["met"] for t in low_median["targets"]] == [False, True]


def test_cudal2_as_shipped_is_judged_beside_the_family():
    rows = [row(1, 1024, 4096, 45.0, 60.0, cudal2_pct=60.0), row(1, 14336, 4096, 80.0, 92.0, cudal2_pct=92.0)]
    s = db.summarize(rows)
    assert s["cudal2"]["all"]["median"] == pytest.approx(76.0) and s["cudal2"]["nk_le_16m"]["min"] == 60.0
    by_impl = {(t["impl"], t["target"].split(",")[1].strip()): t["met"] for t in s["targets"]}
    assert by_impl == {("decode", "all problems >= 85%"): False, ("decode", "N*K <= 16M >= 50%"): False,
                       ("cudal2", "all problems >= 85%"): False, ("cudal2", "N*K <= 16M >= 50%"): True}
    # a run that did not measure cudal2 judges the family alone, and its report still renders
    old = db.summarize([row(1, 1024, 4096, 45.0, 60.0)])
    assert [t["impl"] for t in old["targets"]] == ["decode", "decode"]
    assert "| cudal2 | all | 0 | 1 | - | - |" in db.render_markdown(doc([row(1, 1024, 4096, 45.0, 60.0)]))


def test_a_problem_without_a_correct_decode_config_fails_the_targets():
    rows = [row(1, 1024, 4096, None, 60.0), row(1, 4096, 4096, 99.0, 60.0), row(1, 14336, 4096, 99.0, 92.0)]
    s = db.summarize(rows)
    assert s["decode"]["nk_le_16m"] == {"n": 1, "missing": 1, "median": 99.0, "min": 99.0}
    assert [t["met"] for t in s["targets"]] == [False, False]
    assert s["vs_cublaslt_autotune"]["compared"] == 2
    empty = db.summarize([])
    assert empty["decode"]["all"] == {"n": 0, "missing": 0, "median": None, "min": None}
    assert [t["met"] for t in empty["targets"]] == [False, False]
    assert empty["vs_cublaslt_autotune"]["geomean_speedup"] is None


def doc(rows, complete=True):
    return {"environment": {"gpu": "NVIDIA H200", "commit": "abc", "date": "2026-11-23", "cuda": "12.8",
                            "torch": "2.14.1", "cublas": "12.8.4", "command": "python -m benchmarks.decode_bandwidth"},
            "bandwidth": {"gbs": 4200.0, "median_gbs": 4150.0, "source": "device-to-device copy of 2 GiB"},
            "protocol": {"cold": "input sets total > 4x L2 (60 MiB)"}, "budget_s": 150.0, "wall_s": 42.0,
            "complete": complete, "rows": rows, "summary": db.summarize(rows)}


def test_markdown():
    rows = [row(8, 4096, 4096, 70.0, 80.0), row(1, 1024, 4096, None, 60.0, dtype="bf16")]
    text = db.render_markdown(doc(rows))
    assert "4200 GB/s" in text and "NVIDIA H200" in text
    assert "| decode | nk_le_16m | 1 | 1 | 70.0 | 70.0 |" in text
    assert "Decode beats cuBLASLt-autotune on 0 of 1 problems" in text
    assert "decode: median % of bandwidth, all problems >= 85%: 70.0% -> not met" in text
    assert f"| fp16 | 8 | 4096 | 4096 | - | - | {KERNEL} | 4 | 1.43 | 70.0 | 2.00 | 50.0 | 1.25 | 80.0 | 0.875 |" in text
    assert "| bf16 | 1 | 1024 | 4096 | - | - | - | - | - | - | 2.00 | 50.0 | 1.67 | 60.0 | - |" in text
    shipped = db.render_markdown(doc([row(8, 4096, 4096, 70.0, 80.0, cudal2_pct=80.0)]))
    assert f"| fp16 | 8 | 4096 | 4096 | 1.25 | 80.0 | {KERNEL} |" in shipped and "| cudal2 | all | 1 | 0 | 80.0 |" in shipped
    assert text.index("| bf16 |") < text.index("| fp16 |")  # rows sorted by dtype, N, K, M
    assert "partial run" not in text and "partial run" in db.render_markdown(doc(rows, complete=False))


def test_write_puts_markdown_next_to_json(tmp_path):
    out = tmp_path / "r" / "decode_bandwidth.json"
    db.write(out, doc([row(8, 4096, 4096, 70.0, 80.0)]))
    assert out.exists() and (tmp_path / "r" / "decode_bandwidth.md").read_text().startswith("# Decode family")


def test_options():
    args = db.parse_args(["--out", "x.json"])
    assert args.dtypes == ["fp16", "bf16"] and args.max_shapes is None and args.budget_s == 150.0
    args = db.parse_args(["--out", "x.json", "--dtypes", "bf16", "--max-shapes", "5", "--budget-s", "30"])
    assert args.dtypes == ["bf16"] and args.max_shapes == 5 and args.budget_s == 30.0
    for bad in (["--dtypes", "fp32"], ["--dtypes", ","], ["--max-shapes", "0"]):
        with pytest.raises(SystemExit):
            db.parse_args(["--out", "x.json", *bad])
    for neither_or_both in ([], ["--out", "x.json", "--render", "y.json"]):
        with pytest.raises(SystemExit):
            db.parse_args(neither_or_both)  # --out (measure) or --render (report), one of them
    assert db.parse_args(["--render", "y.json.gz"]).render.name == "y.json.gz"


def test_each_weight_stream_is_summarised_on_its_own(tmp_path):
    """The report's per-stream table: per problem the fastest correct config among each stream's kernels; a stream
    with no correct config on a problem counts it untimed; `--render` writes it from a stored (gzip) run."""
    import gzip, json
    r1 = row(1, 4096, 4096, 70.0, 80.0)
    r1["decode"] = [cand(2.0, 50.0, kernel=KERNEL, splits=0), cand(1.0, 70.0, kernel=KERNEL + "_tma", splits=8),
                    cand(1.5, 60.0, kernel=KERNEL + "_tma", splits=0), cand(None, None, False, kernel=KERNEL + "_evictfirst")]
    r2 = row(1, 1024, 1024, 40.0, 30.0)
    r2["decode"] = [cand(2.5, 40.0, kernel=KERNEL, splits=0)]
    streams = db.by_weight_stream([r1, r2])
    assert streams["cp.async"]["all"] == {"n": 2, "missing": 0, "median": 45.0, "min": 40.0}
    assert streams["tma"]["all"] == {"n": 1, "missing": 1, "median": 70.0, "min": 70.0}
    assert streams["evictfirst"]["all"] == {"n": 0, "missing": 2, "median": None, "min": None}
    stored = tmp_path / "run.json.gz"
    stored.write_bytes(gzip.compress(json.dumps(doc([r1, r2])).encode()))
    assert db.main(["--render", str(stored)]) == 0
    text = (tmp_path / "run.md").read_text()
    assert "| tma | all | 1 | 1 | 70.0 | 70.0 |" in text and "| cp.async | all | 2 | 0 | 45.0 | 40.0 |" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_without_a_gpu_exits_2(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert db.main(["--out", str(out)]) == 2
    assert "needs the compiled extension and a CUDA GPU" in capsys.readouterr().out and not out.exists()
