"""The write-up of what the search found: winners by the table margin, their patterns by problem-size bucket."""
from cudal2_catalog.config import HgemmConfig
from search.candidate import Problem
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store
from search.table_select import from_sweep_rows
from studies import findings

SM90_SK = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_streamk"
SM80 = "sm80_cute_fp16_nt_64x64x64_s3_w4"


def row(m, n, k, *cands):
    return from_sweep_rows([{"layout": "nt", "dtype": "fp16", "m": m, "n": n, "k": k, "baseline_us": 10.0,
                             "candidates": [dict(kernel=kern, us=us, correct=ok, splits=splits)
                                            for kern, us, ok, splits in cands]}])[0]


def test_a_winner_must_be_correct_and_beat_the_margin():
    assert findings.winner(row(64, 64, 64, (SM80, 5.0, False, 0), (SM80, 9.9, True, 2)))[0] is None
    best, speedup = findings.winner(row(64, 64, 64, (SM80, 9.0, True, 2), (SM80, 9.5, True, 0)))
    assert best.knobs.splits == 2 and round(speedup, 3) == 1.111
    assert findings.winner(row(64, 64, 64, (SM80, 9.8, True, 0))) == (None, 10 / 9.8)  # 2% under: not a win


def test_split_k_labels_follow_each_family():
    assert findings.patterns(HgemmConfig.from_name(SM90_SK), 4)["split-K"] == "stream-K, 4 splits"
    persistent = HgemmConfig.from_name("sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent")
    assert findings.patterns(persistent, 4)["split-K"] == "none"  # the persistent scheduler ignores the knob
    assert findings.patterns(HgemmConfig.from_name(SM80), 0)["split-K"] == "automatic"
    assert findings.patterns(HgemmConfig.from_name(SM80), 8) == {"family": "sm80_cute", "tile": "64x64x64",
                                                                 "split-K": "8 splits", "warps": "4"}


def test_lines_count_winners_by_bucket():
    text = "\n".join(findings.findings_lines([row(64, 64, 64, (SM80, 5.0, True, 8)),
                                              row(16384, 16384, 8192, (SM90_SK, 9.0, True, 0)),
                                              row(8192, 8192, 4096, (SM90_SK, 11.0, True, 0))]))
    assert "| <24 | 1 | 1 | 2.000 | 2.000 | 0 |" in text
    assert "| 36-40 | 1 | 0 | 1.000 | 0.909 | 0 |" in text and "| 36-40 | family" not in text
    assert "| 40-43 | family | sm90_tma_ws (1) |" in text and "| 40-43 | split-K | stream-K (1) |" in text


def test_cli_writes_findings_from_a_store(tmp_path):
    problems = [Problem("nt", "fp16", 64, 4096, 4096), Problem("nt", "fp16", 4096, 4096, 4096)]
    store = Store(tmp_path / "s.db")
    Search.start(store, SimulatedBackend(), RunArgs(policy="sweep", budget_evals=30), problems).run()
    store.close()
    assert findings.main(["--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "f.md")]) == 0
    text = (tmp_path / "f.md").read_text()
    assert "## store s.db, Simulated H100 SXM" in text and "| bucket log2(MNK) | problems |" in text
