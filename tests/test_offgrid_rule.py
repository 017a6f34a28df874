"""scripts/check_offgrid_rule.py's pure parts: the nearest-M rule (the dispatcher's, csrc/dispatch.cpp) and the
verdict that enables it."""
import importlib.util
from pathlib import Path

import pytest

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


def row(heuristic, rule_us, autotune):
    return {"heuristic_us": heuristic, "rule_us": rule_us, "autotune_us": autotune}


def test_the_rule_is_safe_only_without_losses():
    even = [row(10.0, 9.0, 8.5)] * 19 + [row(10.0, 10.5, 9.0)]
    assert rule.verdict(even)["safe"]  # geomean > 1, one loss in 20 (5%)
    lossy = [row(10.0, 9.0, 8.5)] * 18 + [row(10.0, 10.5, 9.0)] * 2
    assert not rule.verdict(lossy)["safe"]  # two losses in 20
    slower = [row(10.0, 10.2, 9.0)] * 20
    assert not rule.verdict(slower)["safe"]  # no loss beyond 3%, but slower on geomean


def test_tuned_ms_groups_configuration_entries_by_layout_dtype_n_k():
    lt = {"cublaslt": {"algo_id": 1}}
    entries = {"nt_fp16_64_256_512": lt, "nt_fp16_8_256_512": lt, "nn_fp16_16_256_512": lt,
               "nt_fp16_32_256_512": {"kernel": "k"}}
    assert rule.tuned_ms(entries) == {("nt", "fp16", 256, 512): [8, 64], ("nn", "fp16", 256, 512): [16]}
