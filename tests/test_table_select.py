"""Table selection from measurements: only correct kernels that beat the baseline by the margin, under a budget."""
import json

import pytest

from cudal2_ops import tables
from search import emit, table_select, table_sources

ENV = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "capability": [9, 0], "cuda": "13.0"}


def row(m, baseline_us, *cands, layout="nt", dtype="fp16"):
    return {"layout": layout, "dtype": dtype, "m": m, "n": 64, "k": 64, "baseline_us": baseline_us,
            "candidates": [dict(kernel=k, us=us, correct=ok) for k, us, ok in cands]}


def test_winner_must_be_correct_and_beat_margin():
    rows = [row(1, 10.0, ("fast_wrong", 5.0, False), ("ok", 9.0, True)),   # 10% faster and correct: in
            row(2, 10.0, ("barely", 9.9, True)),                            # 1% faster: within noise, out
            row(3, 10.0, ("slow", 12.0, True))]                             # slower: out
    entries = table_select.select_entries(table_select.from_sweep_rows(rows), margin=0.03)
    assert list(entries) == ["nt_fp16_1_64_64"]
    assert entries["nt_fp16_1_64_64"]["kernel"] == "ok"
    assert entries["nt_fp16_1_64_64"]["speedup"] == round(10 / 9, 4)


def test_entry_carries_the_winning_knobs():
    """A knob variant that wins carries its knobs into the entry, not the kernel's defaults."""
    r = row(1, 10.0, ("k", 9.0, True))
    r["candidates"] = [{**r["candidates"][0], "splits": 0, "swizzle": 0, "raster": 0},
                       {"kernel": "k", "us": 8.0, "correct": True, "splits": 2, "swizzle": 4, "raster": 1}]
    entry = table_select.select_entries(table_select.from_sweep_rows([r]))["nt_fp16_1_64_64"]
    assert [entry[f] for f in ("kernel", "splits", "swizzle", "raster", "kernel_us")] == ["k", 2, 4, 1, 8.0]


def test_kernel_budget_keeps_the_most_valuable_kernels():
    rows = [row(1, 10.0, ("a", 5.0, True)), row(2, 10.0, ("a", 5.0, True)), row(3, 10.0, ("b", 8.0, True))]
    entries = table_select.select_entries(table_select.from_sweep_rows(rows), margin=0.0, kernel_budget=1)
    assert {e["kernel"] for e in entries.values()} == {"a"}
    assert len(entries) == 2


def test_built_table_passes_the_loader_validators(tmp_path, monkeypatch):
    doc = table_select.build_table(table_select.from_sweep_rows([row(1, 10.0, ("k", 5.0, True))]), ENV, "r", "p")
    assert doc["header"]["search_run"] == "r" and doc["header"]["timing_protocol"] == "p"
    path = table_select.table_path(tmp_path, ENV)
    assert path == tmp_path / "sm90" / "nvidia_h100_80gb_hbm3.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    facts = tables.DeviceFacts(ENV["gpu_name"], 132, (9, 0), "13.0")
    table = tables.load_table_for(facts)
    assert table is not None and tables.table_rows(table) == [("nt", "fp16", 1, 64, 64, "k", 0, 0, 0, [], [])]


def test_merged_sweeps_take_each_problem_from_the_last_sweep():
    old = {"run_id": "full", "environment": ENV, "protocol": "warm",
           "rows": [row(1, 10.0, ("a", 9.0, True)), row(2, 10.0, ("a", 9.0, True))]}
    new = {"run_id": "ref", "environment": ENV, "protocol": "warm", "rows": [row(2, 10.0, ("b", 5.0, True))]}
    merged = table_select.merge_sweeps([old, new])
    assert merged["run_id"] == "full+ref" and merged["protocol"] == "warm"
    cold = table_select.merge_sweeps([old, {**new, "protocol": "cold"}])
    assert cold["protocol"] == "full: warm; ref: cold"  # each sweep's rows keep their own protocol
    entries = table_select.select_entries(table_select.from_sweep_rows(merged["rows"]))
    assert {key: e["kernel"] for key, e in entries.items()} == {"nt_fp16_1_64_64": "a", "nt_fp16_2_64_64": "b"}


def test_sweeps_of_different_gpus_do_not_merge():
    other = {**ENV, "gpu_name": "NVIDIA H200"}
    with pytest.raises(ValueError, match="different GPUs"):
        table_select.merge_sweeps([{"run_id": "x", "environment": ENV, "protocol": "p", "rows": []},
                                   {"run_id": "y", "environment": other, "protocol": "p", "rows": []}])


def test_emit_merge_keeps_what_the_measurements_do_not_contradict():
    """Against an older table of the same GPU: a new winner replaces its entry; an older kernel entry measured again
    (same kernel and knobs) without winning goes; cuBLASLt-configuration entries and unmeasured problems stay."""
    existing = {"header": {**ENV, "search_run": "old", "rules": {"nearest_m_up": False,
                                                                 "nearest_m_cublaslt": "unaligned_m"}},
                "entries": {"nt_fp16_1_64_64": {"kernel": "old_k"},
                            "nt_fp16_2_64_64": {"kernel": "lost", "splits": 2},
                            "nt_fp16_4_64_64": {"cublaslt": [1, 2, 3]},
                            "nt_fp16_8_64_64": {"kernel": "unmeasured"}}}
    rows = [row(1, 10.0, ("new_k", 5.0, True)), row(2, 10.0, ("lost", 11.0, True)), row(4, 10.0, ("x", 12.0, True))]
    rows[1]["candidates"][0]["splits"] = 2
    measured = table_select.from_sweep_rows(rows)
    merged = emit.merge_into(existing, table_select.build_table(measured, ENV, "new", "p"), measured)
    assert {key: e.get("kernel", "cublaslt") for key, e in merged["entries"].items()} == {
        "nt_fp16_1_64_64": "new_k", "nt_fp16_4_64_64": "cublaslt", "nt_fp16_8_64_64": "unmeasured"}
    assert merged["header"]["kept_from"] == {"search_run": "old", "entries": 2}
    assert merged["header"]["rules"] == {"nearest_m_up": False, "nearest_m_cublaslt": "unaligned_m"}


def test_committed_tables_are_reproduced_from_their_results():
    """Each committed sm90 table is exactly what the tools build from the committed results search.table_sources
    names: the sweeps through table_select, then (H200) the search store through `search emit`, merged, then the
    tunings, through the sanitizer gate against the committed sanitizer reports. No entry is hand-edited."""
    for slug, sources in table_sources.SOURCES.items():
        committed = json.loads(table_sources.table_file(slug).read_text())
        built = table_sources.rebuild(slug, committed["header"])
        folder = table_sources.RESULTS / slug
        assert built.swept["header"]["search_run"] == "+".join(table_select.read_sweep(folder / name)["run_id"]
                                                               for name in sources.sweeps)
        if sources.store:
            assert built.emitted["header"]["kept_from"]["search_run"] == built.swept["header"]["search_run"]
        for tuning in built.tunings:  # then scripts/tune_grid.py measured choices over that table (its results)
            assert committed["header"]["search_run"] == f"tune-{committed['header']['tuned']}"
            assert tuning["environment"]["gpu"] == committed["header"]["gpu_name"]
        assert built.table == committed, slug  # every writer's last step: the sanitizer gate