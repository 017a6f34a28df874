"""CPU tests of studies.table_drift: a benchmark's losses against its table's tuned times, by cause."""
from __future__ import annotations

import gzip
import json

from cudal2_ops.tables import LT_CONFIG_FIELDS
from studies import table_drift

CONFIG_A, CONFIG_B = [66, 20, 35, 1, 0, 0, 1, 0, 3], [66, 17, 35, 1, 0, 0, 0, 0, 3]


def row(m: int, impl: str, layout: str, us: float, ran: list[int] | None = None) -> dict:
    r = {"m": m, "n": 4096, "k": 4096, "dtype": "fp16", "impl": impl, "layout": layout, "mode": "kernel", "ok": True,
         "median_us": us}
    return r | ({"ran": {"path": "cublaslt", "cublaslt_config": ran}} if ran else {})


def entry(m: int, tuned_us: float, baseline_us: float) -> tuple[str, dict]:
    return f"nt_fp16_{m}_4096_4096", {"cublaslt": {}, "cublaslt_us": tuned_us, "baseline_us": baseline_us}


def test_losses_are_told_apart_by_what_drifted(tmp_path):
    bar = "cublaslt-autotune-tn"
    rows = [  # m=256: the entry ran 10% slower than tuned, the bar as tuned: the entry lost its rank
            row(256, "cudal2", "nt", 11.0, CONFIG_A), row(256, bar, "nt", 10.0, CONFIG_B),
            row(256, f"{bar}-repeat", "nt", 10.0),
            # m=512: both 10% slower than at tuning, cudal2 on the bar's own configuration
            row(512, "cudal2", "nt", 22.0, CONFIG_A), row(512, bar, "nt", 20.9, CONFIG_A),
            # m=1024: the entry at its tuned time, the bar faster than the tuner's bar; m=2048: no loss
            row(1024, "cudal2", "nt", 40.0), row(1024, bar, "nt", 36.0),
            row(2048, "cudal2", "nt", 80.0), row(2048, bar, "nt", 80.0),
            row(2048, "cudal2", "nn", 80.0)]   # no NN bar in the run: not compared
    entries = dict([entry(256, 10.0, 10.0), entry(512, 20.0, 19.0), entry(1024, 40.0, 40.0), entry(2048, 80.0, 80.0)])
    run = tmp_path / "run.json.gz"
    run.write_bytes(gzip.compress(json.dumps({"rows": rows}).encode()))
    got = {r["shape"][0]: r for r in table_drift.drift_rows(entries, [table_drift.read_json(run)])}
    assert sorted(got) == [256, 512, 1024, 2048]
    assert table_drift.cause(got[256]) == "entry lost its rank" and got[256]["same_configuration"] is False
    assert table_drift.cause(got[512]) == "both slower than at tuning" and got[512]["same_configuration"] is True
    assert table_drift.cause(got[1024]) == "entry at its tuned time" and got[1024]["same_configuration"] is None
    _, doc = table_drift.report(list(got.values()), [str(run)])
    summary = doc["by_bucket"]["32-36"]
    assert summary["losses"] == 3 and summary["losses_on_the_bars_configuration"] == 1
    assert summary["loss_causes"] == {"entry lost its rank": 1, "both slower than at tuning": 1,
                                      "entry at its tuned time": 1}
    # the losses a re-tune could mend: not m=512, which ran the bar's own configuration
    assert table_drift.loss_keys(list(got.values())) == ["nt_fp16_1024_4096_4096", "nt_fp16_256_4096_4096"]
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"entries": entries}))
    losses = tmp_path / "losses.txt"
    assert table_drift.main(["--table", str(table), "--runs", str(run), "--out", str(tmp_path / "drift.md"),
                             "--losses-out", str(losses)]) == 0
    assert losses.read_text() == "nt_fp16_1024_4096_4096\nnt_fp16_256_4096_4096\n"


def test_the_bars_pick_is_looked_up_among_the_entrys_choices():
    """The bar's configuration is found among the entry's choices (0 its configuration, i its i-th near-tie, -1 none);
    an entry without near-ties (tuned before they were recorded) or a row without `ran` does not say."""
    fields = dict(zip(LT_CONFIG_FIELDS, CONFIG_A))
    near = dict(fields, tile=CONFIG_B[1], custom=0)
    listed = {"cublaslt": fields, "cublaslt_near": [{"cublaslt": near}]}
    assert table_drift.bar_choice(listed, row(1, "b", "nt", 1.0, CONFIG_B)) == 1
    assert table_drift.bar_choice(listed, row(1, "b", "nt", 1.0, CONFIG_A)) == 0
    assert table_drift.bar_choice(listed, row(1, "b", "nt", 1.0, [66, 1, 35, 1, 0, 0, 0, 0, 3])) == -1
    assert table_drift.bar_choice(listed, row(1, "b", "nt", 1.0)) is None
    assert table_drift.bar_choice({"cublaslt": fields}, row(1, "b", "nt", 1.0, CONFIG_A)) is None


def test_the_confirmation_is_summarised_by_what_each_side_kept(tmp_path):
    """Each shape with near-ties falls in one class of (what cudal2's first call kept, what the bar picked), with the
    class's geomean and losses; shapes whose rows do not say are left out; the report names its table."""
    fields = dict(zip(LT_CONFIG_FIELDS, CONFIG_A))
    text = lambda config: " ".join(f"{k}={v}" for k, v in zip(LT_CONFIG_FIELDS, config))
    entries = {f"nt_fp16_{m}_4096_4096": {"cublaslt": fields, "cublaslt_us": 10.0, "baseline_us": 10.0,
                                          "cublaslt_near": [{"cublaslt": dict(zip(LT_CONFIG_FIELDS,
                                                                                 CONFIG_B))}]} for m in (1, 2, 3)}
    bar = "cublaslt-autotune-tn"

    def cudal2(m, us, config, pick):
        return row(m, "cudal2", "nt", us) | {"ran": {"path": "cublaslt", "cublaslt_config": text(config),
                                                        "cublaslt_near_tie_pick": pick}}
    rows = [cudal2(1, 10.5, CONFIG_B, 1), row(1, bar, "nt", 10.0, CONFIG_A),     # switched, the bar kept the entry
            cudal2(2, 10.0, CONFIG_A, 0), row(2, bar, "nt", 10.0, CONFIG_A),     # both kept the entry
            cudal2(3, 10.0, CONFIG_A, -1), row(3, bar, "nt", 10.0, CONFIG_A)]    # not yet timed: not counted
    run = tmp_path / "run.json.gz"
    run.write_bytes(gzip.compress(json.dumps({"rows": rows}).encode()))
    got = table_drift.drift_rows(entries, [table_drift.read_json(run)])
    lines, doc = table_drift.report(got, [str(run)], "t.json")
    assert doc["confirmation"] == {"a near-tie / the entry": {"shapes": 1, "geomean": 10.0 / 10.5, "losses": 1},
                                   "the entry / the entry": {"shapes": 1, "geomean": 1.0, "losses": 0}}
    assert "- Table: `t.json`" in lines and doc["table"] == "t.json"


def test_cudal2s_configuration_text_compares_with_the_bars_fields():
    """cudal2's rows record the configuration as explain's text, the bars' as fields: the same configuration in both
    forms counts as the same (a comparison of text with a list never matched before the eleventh session's report)."""
    text = " ".join(f"{name}={value}" for name, value in zip(LT_CONFIG_FIELDS, CONFIG_A))
    ours = {"ran": {"path": "cublaslt", "cublaslt_config": text}}
    assert table_drift.same_configuration(ours, row(1, "b", "nt", 1.0, CONFIG_A)) is True
    assert table_drift.same_configuration(ours, row(1, "b", "nt", 1.0, CONFIG_B)) is False
    assert table_drift.same_configuration({"ran": {"path": "kernel"}}, row(1, "b", "nt", 1.0, CONFIG_A)) is None
