"""The nearest-M cuBLASLt rule per M class on the GPU: a table whose header enables it for unaligned M sends an odd-M
miss to the nearest tuned M's configuration and an aligned-M miss to cuBLASLt's heuristic (explain), "all" sends both
to the configuration; results exact either way."""
import json

import pytest
from test_tune_gpu import run_python

import cudal2_ops
from cudal2_ops import tables, tune
from cudal2_ops._extension import _C

pytestmark = pytest.mark.skipif(not cudal2_ops.is_available(), reason="compiled extension not built")

N, K = 384, 512
TUNED_M = 64
ODD_M = 61
ALIGNED_M = 40  # 40 % 16 != 0: an alignment other than tables.M_ALIGNMENT in the dispatcher would show


def config_running_every_m() -> list[int]:
    """A cuBLASLt configuration among the heuristic's candidates for each of TUNED_M, ODD_M and ALIGNED_M (so the
    rule's choice runs where it is given), preferably not the heuristic's own choice for ODD_M."""
    candidates = {}
    for m in (TUNED_M, ODD_M, ALIGNED_M):
        run = tune.ProblemRun.make(tune.Problem("nt", "fp16", m, N, K))
        candidates[m] = [list(c) for c in _C.tuning.lt_candidates(run.a, run.b, run.out, "nt")]
    common = [c for c in candidates[ODD_M] if all(c in found for found in candidates.values())]
    assert common, "cuBLASLt lists no configuration for all three M values"
    return common[-1]


@pytest.mark.parametrize("scope,rule_serves", [("unaligned_m", {ODD_M}), ("all", {ODD_M, ALIGNED_M})])
def test_the_rule_serves_exactly_the_classes_its_header_enables(tmp_path, scope, rule_serves):
    config = config_running_every_m()
    path = tmp_path / "table.json"
    path.write_text(json.dumps({
        "header": tune.table_header(0, {"rules": {"nearest_m_up": False, "nearest_m_cublaslt": scope}}),
        "entries": {tables.entry_key("nt", "fp16", TUNED_M, N, K): {
            "cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, config))}}}))
    out = run_python(f"""
        import json, torch, cudal2_ops
        w = torch.randint(-2, 3, ({N}, {K}), device="cuda").half()
        res = {{}}
        for m in ({ODD_M}, {ALIGNED_M}):
            x = torch.randint(-2, 3, (m, {K}), device="cuda").half()
            exact = torch.equal(cudal2_ops.linear(x, w), (x.float() @ w.float().t()).half())
            res[m] = {{"explain": cudal2_ops.explain(x, w, layout="nt"), "exact": exact}}
        print(json.dumps(res))
    """, {"CUDAL2_TABLE": str(path), "CUDAL2_TUNED_TABLE": str(tmp_path / "none.json")})
    for m in (ODD_M, ALIGNED_M):
        info = out[str(m)]["explain"]
        assert out[str(m)]["exact"], (m, info)
        if m in rule_serves:
            assert info["cublaslt_policy"] == "table" and info["tuned_m"] == TUNED_M, (m, info)
            assert f"algo_id={config[tables.LT_CONFIG_FIELDS.index('algo_id')]}" in info["cublaslt_config"], (m, info)
            m_class = "unaligned M" if m % tables.M_ALIGNMENT else "aligned M"
            assert f"nearest_m_cublaslt ({m_class})" in info["reason"] and f"M={TUNED_M}" in info["reason"], (m, info)
        else:
            assert info["cublaslt_policy"] == "heuristic" and "tuned_m" not in info, (m, info)
            assert info["reason"] == "no table entry for this shape", (m, info)
