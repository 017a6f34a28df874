"""scripts/check_offgrid_rule.py's pure parts: the nearest-M rule (the dispatcher's, csrc/dispatch.cpp), the off-grid
sample split by M class, and the per-class verdicts that enable it."""
import importlib.util
import json
from pathlib import Path

import pytest

from cudal2_ops import tables
from cudal2_testing.measure import shapes

SPEC = importlib.util.spec_from_file_location(
    "check_offgrid_rule", Path(__file__).resolve().parent.parent / "scripts" / "check_offgrid_rule.py")
rule = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rule)


@pytest.mark.parametrize("m,expected", [(1, 8), (8, 8), (11, 8), (12, 16), (13, 16), (100, 128), (5000, 1024),
                                        (96, 128), (90, 64)])
def test_nearest_m_on_a_log_scale_ties_going_up(m, expected):
    # 12 is nearer 8 in absolute terms but on a log scale 16/12 < 12/8; 96 is exactly between 64 and 128 (128/96 =
    # 1.33 < 96/64 = 1.5); 90: 128/90 = 1.42 < 90/64 = 1.41 is false, so 64.
    assert rule.nearest_m([8, 16, 64, 128, 1024], m) == expected


def row(heuristic, rule_us, autotune, m=64, rule_m=128):
    return {"problem": tables.entry_key("nt", "fp16", m, 256, 512), "heuristic_us": heuristic, "rule_us": rule_us,
            "autotune_us": autotune, "rule_m": rule_m}


def test_the_rule_is_safe_only_without_losses():
    even = [row(10.0, 9.0, 8.5)] * 19 + [row(10.0, 10.5, 9.0)]
    assert rule.verdict(even)["safe"]  # geomean > 1, one loss in 20 (5%)
    lossy = [row(10.0, 9.0, 8.5)] * 18 + [row(10.0, 10.5, 9.0)] * 2
    assert not rule.verdict(lossy)["safe"]  # two losses in 20
    slower = [row(10.0, 10.2, 9.0)] * 20
    assert not rule.verdict(slower)["safe"]  # no loss beyond 3%, but slower on geomean
    assert not rule.verdict([])["safe"]  # nothing measured: nothing enabled


def test_the_sample_holds_off_grid_problems_of_each_class():
    on_grid = {m for m, _, _ in shapes.g1000() + shapes.llm()}
    problems = rule.sample(per_class=25, seed=0)
    assert set(problems) == set(tables.M_CLASSES)
    for cls, mnk in problems.items():
        assert len(mnk) == 25 and len(set(mnk)) == 25
        assert all(tables.m_class(m) == cls and m not in on_grid for m, _, _ in mnk), (cls, mnk)


def test_round_robin_keeps_a_cut_run_balanced():
    assert rule.round_robin([[1, 2, 3], ["a"], [10, 20]]) == [1, "a", 10, 2, 20, 3]


def class_rows(aligned_losses: int, unaligned_losses: int) -> list[dict]:
    """20 rows per class (M 200 aligned, M 333 not), the rule winning except on the given number of problems."""
    def rows_of(m, losses):
        return [row(10.0, 12.0 if i < losses else 8.0, 7.5, m=m) for i in range(20)]
    return rows_of(200, aligned_losses) + rows_of(333, unaligned_losses)


@pytest.mark.parametrize("aligned_losses,unaligned_losses,scope", [
    (5, 0, "unaligned_m"), (0, 1, "all"), (0, 4, "aligned_m"), (6, 3, "off")])
def test_the_verdict_is_per_class_and_enables_exactly_the_safe_classes(aligned_losses, unaligned_losses, scope):
    verdicts = rule.class_verdicts(class_rows(aligned_losses, unaligned_losses))
    assert verdicts["aligned_m"]["losses_vs_heuristic"] == aligned_losses
    assert verdicts["unaligned_m"]["losses_vs_heuristic"] == unaligned_losses
    assert verdicts["all"]["problems"] == 40
    assert rule.safe_scope(verdicts) == scope


def test_problems_without_a_tuned_m_are_left_out_of_the_verdict():
    rows = class_rows(0, 0) + [row(10.0, 10.0, 9.0, m=335, rule_m=None)] * 5
    assert rule.class_verdicts(rows)["unaligned_m"]["problems"] == 20


def test_reevaluate_prints_the_per_class_verdicts_of_a_results_file(tmp_path, capsys):
    path = tmp_path / "offgrid.json"
    path.write_text(json.dumps({"rows": class_rows(5, 0)}))
    assert rule.main(["--reevaluate", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["scope"] == "unaligned_m" and not printed["verdicts"]["aligned_m"]["safe"]


def test_tuned_configs_are_the_ones_the_dispatcher_installs():
    lt = {"cublaslt": dict.fromkeys(tables.LT_CONFIG_FIELDS, 1)}
    slow = {"cublaslt": dict.fromkeys(tables.LT_CONFIG_FIELDS, 2), "cublaslt_us": 9.0, "cublaslt_heuristic_us": 8.0}
    entries = {"nt_fp16_64_256_512": lt, "nt_fp16_8_256_512": lt, "nn_fp16_16_256_512": lt,
               "nt_fp16_32_256_512": {"kernel": "k"}, "nt_fp16_128_256_512": slow}
    config = [1] * len(tables.LT_CONFIG_FIELDS)
    assert rule.tuned_configs(tables.Table(Path("t.json"), {}, entries)) == {
        ("nt", "fp16", 256, 512): {8: config, 64: config}, ("nn", "fp16", 256, 512): {16: config}}


def test_a_partly_tuned_table_enables_no_rule():
    """Coverage of the grid: every G1000 and LLM problem of the layouts and dtypes checked must have an entry."""
    grid = set(shapes.g1000()) | set(shapes.llm())
    entries = {tables.entry_key("nt", "fp16", m, n, k): {"cublaslt": {}} for m, n, k in grid}
    full = tables.Table(Path("t.json"), {}, entries)
    assert rule.grid_coverage(full, ["nt"], ["fp16"]) == {"grid_problems": len(grid), "in_table": len(grid),
                                                           "complete": True}
    partial = tables.Table(Path("t.json"), {}, dict(list(entries.items())[1:]))
    assert not rule.grid_coverage(partial, ["nt"], ["fp16"])["complete"]
    assert not rule.grid_coverage(full, ["nt", "nn"], ["fp16"])["complete"]
