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


def test_a_code_variant_is_set_against_its_default_code_twin():
    """Only candidates differing from a kernel in code-level fields have a twin; the ratio is twin / candidate time on
    problems where both ran correctly at default knobs (a knob variant or a wrong run does not count)."""
    variant, twin = "sm80_cute_fp16_nt_64x64x64_s3_w4_r1", "sm80_cute_fp16_nt_64x64x64_s3_w4"
    assert candidate_report.default_code_twin(variant) == twin
    assert candidate_report.default_code_twin("decode_fp16_nt_8x128x64_s4_w8_tma") == "decode_fp16_nt_8x128x64_s4_w8"
    assert candidate_report.default_code_twin(twin) is None and candidate_report.default_code_twin("new") is None
    rows = [row(1, 10.0, (variant, 8.0, True), (twin, 10.0, True)),
            row(2, 10.0, (variant, 9.0, True), (twin, 9.0, True), (twin, 4.0, True)),
            row(4, 10.0, (variant, 5.0, False), (twin, 9.0, True))]
    rows[1]["candidates"][2]["splits"] = 4  # a knob variant of the twin
    assert candidate_report.twin_speedups(rows, {variant, "new"}) == {variant: [10.0 / 8.0, 1.0]}
    doc = {"run_id": "sweep-x", "protocol": "p", "kernels": [variant, twin], "rows": rows,
           "environment": {"gpu_name": "NVIDIA H100", "sm_count": 132, "cuda": "13.0"}}
    assert f"| `{variant}` | `{twin}` | 2 | {(1.25) ** 0.5:.3f} | 1.000 | 1.250 |" in candidate_report.markdown(doc, {variant})
