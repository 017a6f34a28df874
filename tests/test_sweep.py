"""search.sweep's pure parts: the problem set and the per-family summary."""
import math

from search import sweep


def test_problems_put_reference_shapes_first_then_smallest():
    probs = sweep.problems(sample=20, seed=0, max_log2_mnk=21, llm_max_m=8, llm_dtypes=("fp16", "bf16"))
    assert [p[2:] for p in probs[:4]] == [sweep.REFERENCE_SHAPES[0]] * 2 + [sweep.REFERENCE_SHAPES[1]] * 2
    rest = probs[4:]
    sizes = [math.log2(m * n * k) for _, _, m, n, k in rest]
    assert sizes == sorted(sizes)
    assert ("nt", "fp16", 64, 64, 64) in probs and ("nn", "fp16", 64, 64, 64) in probs
    assert any(p[1] == "bf16" and p[0] == "nt" and p[2] <= 8 for p in probs)
    assert len(set(probs)) == len(probs)


def test_family_summary_uses_each_familys_best_correct_time():
    info = {"a1": {"family": "a"}, "a2": {"family": "a"}, "b1": {"family": "b"}}
    rows = [{"baseline_us": 10.0, "candidates": [{"kernel": "a1", "us": 5.0, "correct": True},
                                                 {"kernel": "a2", "us": 4.0, "correct": False},
                                                 {"kernel": "b1", "us": 20.0, "correct": True}]},
            {"baseline_us": 10.0, "candidates": [{"kernel": "a2", "us": 20.0, "correct": True}]}]
    summary = sweep.family_summary(rows, info)
    assert summary["a"]["problems"] == 2 and summary["a"]["wins"] == 1
    assert math.isclose(summary["a"]["geomean"], math.sqrt(2.0 * 0.5))
    assert summary["b"] == {"problems": 1, "geomean": 0.5, "min": 0.5, "max": 0.5, "wins": 0}
