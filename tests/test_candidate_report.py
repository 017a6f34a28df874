"""Candidate verdicts from a sweep: best candidate vs best built kernel vs cuBLASLt, and whether a candidate enters."""
from studies import candidate_report


def row(m, baseline_us, *cands):
    return {"layout": "nt", "dtype": "fp16", "m": m, "n": 64, "k": 64, "baseline_us": baseline_us,
            "candidates": [dict(kernel=k, us=us, correct=ok) for k, us, ok in cands]}


ROWS = [row(1, 10.0, ("new", 9.0, True), ("old", 9.5, True)),     # candidate fastest and 10% under cuBLASLt: enters
        row(2, 10.0, ("new", 9.9, True), ("old", 12.0, True)),    # fastest but within the margin: does not enter
        row(4, 10.0, ("new", 5.0, False), ("old", 8.0, True)),    # a wrong candidate never counts
        row(8, 10.0, ("new", 9.0, True), ("old", 8.5, True))]     # a built kernel is faster: the built one enters


def test_compare_takes_only_correct_kernels_and_applies_the_tables_rule():
    records = candidate_report.compare(ROWS, {"new"}, margin=0.03)
    assert [r["enters"] for r in records] == [True, False, False, False]
    assert records[2]["candidate"] is None and records[2]["built"]["us"] == 8.0
    assert records[3]["candidate"]["us"] == 9.0 and records[3]["built"]["kernel"] == "old"


def test_summary_geomeans_are_candidate_speedups():
    s = candidate_report.summary(candidate_report.compare(ROWS, {"new"}, margin=0.03))
    assert s["problems"] == 4 and s["enters"] == 1
    expected_vs_built = (9.5 / 9.0 * 12.0 / 9.9 * 8.5 / 9.0) ** (1 / 3)
    assert abs(s["geomean_vs_built"] - expected_vs_built) < 1e-12
    assert abs(s["geomean_vs_cublaslt"] - (10 / 9 * 10 / 9.9 * 10 / 9) ** (1 / 3)) < 1e-12


def test_markdown_has_a_line_per_problem():
    doc = {"run_id": "sweep-x", "protocol": "p", "kernels": ["new", "old"], "rows": ROWS,
           "environment": {"gpu_name": "NVIDIA H200", "sm_count": 132, "cuda": "13.0"}}
    text = candidate_report.markdown(doc, {"new"})
    assert text.count("\n| nt | fp16 |") == len(ROWS)
    assert "on 1;" in text
