"""Table files: keys, header validators (mismatch -> warning and no table), rows for the dispatcher."""
import json

import pytest

import cudal2_ops
from cudal2_ops import tables

FACTS = tables.DeviceFacts("NVIDIA H100 80GB HBM3", 132, (9, 0), "13.0")


def make_header(**overrides):
    header = {"schema_version": 1, "gpu_name": FACTS.gpu_name, "sm_count": 132, "cuda": "13.0",
              "rules": {"nearest_m_up": True}}
    header.update(overrides)
    return header


def write_table(tmp_path, header, entries):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"header": header, "entries": entries}))
    return path


def test_slug_and_arch_dir():
    assert tables.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
    assert tables.arch_dir((9, 0)) == "sm90"
    assert tables.arch_dir((8, 0)) == "sm80"


def test_key_round_trip_and_bad_keys():
    assert tables.parse_key(tables.entry_key("nt", "bf16", 1, 2, 3)) == ("nt", "bf16", 1, 2, 3)
    with pytest.raises(ValueError, match="bad table key"):
        tables.parse_key("tn_fp16_1_2_3")


def test_matching_header_is_accepted(tmp_path, monkeypatch):
    path = write_table(tmp_path, make_header(), {"nt_fp16_64_64_64": {"kernel": "k", "splits": 2}})
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    table = tables.load_table_for(FACTS)
    assert table is not None and table.nearest_m_up
    assert tables.table_rows(table) == [("nt", "fp16", 64, 64, 64, "k", 2, 0, 0, [], [])]


@pytest.mark.parametrize("override,needle", [
    ({"gpu_name": "NVIDIA A100-SXM4-80GB"}, "gpu_name"),
    ({"sm_count": 114}, "sm_count"),
    ({"cuda": "12.4"}, "CUDA"),
    ({"schema_version": 0}, "schema_version"),
])
def test_mismatching_header_is_rejected_with_warning(tmp_path, monkeypatch, override, needle):
    path = write_table(tmp_path, make_header(**override), {})
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    with pytest.warns(RuntimeWarning, match=needle):
        assert tables.load_table_for(FACTS) is None


def test_malformed_table_is_rejected_with_warning(tmp_path, monkeypatch):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    with pytest.warns(RuntimeWarning, match="ignoring table"):
        assert tables.load_table_for(FACTS) is None


def test_no_table_for_unknown_gpu(monkeypatch):
    monkeypatch.delenv("CUDAL2_TABLE", raising=False)
    assert tables.find_table_file(tables.DeviceFacts("Imaginary GPU", 1, (9, 0), "13.0")) is None


def test_committed_tables_are_well_formed():
    for path in tables.REPO_TABLES.glob("*/*.json"):
        table = tables.read_table(path)
        assert table.header["schema_version"] == tables.SCHEMA_VERSION
        for entry in table.entries.values():
            assert entry.get("kernel") or entry.get("cublaslt"), entry
            if entry.get("kernel"):
                assert entry["kernel_us"] > 0 and entry["baseline_us"] > 0
            if entry.get("cublaslt"):
                assert table.header["cublaslt_version"] > 0 and entry["cublaslt_us"] > 0
                assert len(tables.cublaslt_fields(entry)) == len(tables.LT_CONFIG_FIELDS)


LT = {"algo_id": 21, "tile": 18, "stages": 8, "split_k": 1, "reduction": 0, "swizzle": 0, "custom": 0,
      "inner_shape": 0, "cluster_shape": 2}
FACTS_LT = tables.DeviceFacts(FACTS.gpu_name, 132, (9, 0), "13.0", cublaslt=130100)


def test_cublaslt_configurations_become_dispatcher_rows(tmp_path, monkeypatch):
    entries = {"nn_bf16_8_64_64": {"cublaslt": LT, "cublaslt_us": 2.5},
               "nt_fp16_64_64_64": {"kernel": "k", "raster": 1, "cublaslt": LT}}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(cublaslt_version=130100), entries)))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tmp_path / "none.json"))
    rows = sorted(tables.table_rows(tables.load_table_for(FACTS_LT)))
    fields = [21, 18, 8, 1, 0, 0, 0, 0, 2]
    assert rows == [("nn", "bf16", 8, 64, 64, "", 0, 0, 0, fields, []),
                    ("nt", "fp16", 64, 64, 64, "k", 0, 0, 1, fields, [])]


def test_near_ties_reach_the_dispatcher_fastest_first_and_at_most_near_ties_run(tmp_path, monkeypatch):
    """An entry's `cublaslt_near` configurations become its row's near-ties in their order, at most NEAR_TIES_RUN;
    a configuration left out as slower than the heuristic takes its near-ties with it."""
    ties = [{"cublaslt": dict(LT, tile=t), "cublaslt_us": 2.5 + t / 100} for t in range(1, 7)]
    entries = {"nn_bf16_8_64_64": {"cublaslt": LT, "cublaslt_us": 2.5, "cublaslt_near": ties},
               "nt_bf16_8_64_64": {"cublaslt": LT, "cublaslt_us": 8.0, "cublaslt_heuristic_us": 6.0,
                                   "cublaslt_near": ties}}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(cublaslt_version=130100), entries)))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tmp_path / "none.json"))
    rows = tables.table_rows(tables.load_table_for(FACTS_LT))
    fields = [21, 18, 8, 1, 0, 0, 0, 0, 2]
    assert rows == [("nn", "bf16", 8, 64, 64, "", 0, 0, 0, fields,
                     [[21, t, 8, 1, 0, 0, 0, 0, 2] for t in range(1, tables.NEAR_TIES_RUN + 1)])]


def test_configurations_measured_slower_than_the_heuristic_are_not_installed(tmp_path, monkeypatch):
    """A configuration its own tuning timed slower than cuBLASLt's heuristic choice is left out (the problem runs the
    heuristic's choice); a kernel of the same entry stays; one timed as fast or faster is installed."""
    entries = {"nn_fp16_8_64_64": {"cublaslt": LT, "cublaslt_us": 8.05, "cublaslt_heuristic_us": 6.62},
               "nt_fp16_64_64_64": {"kernel": "k", "cublaslt": LT, "cublaslt_us": 3.0, "cublaslt_heuristic_us": 2.9},
               "nn_bf16_8_64_64": {"cublaslt": LT, "cublaslt_us": 2.5, "cublaslt_heuristic_us": 2.5},
               "nt_bf16_8_64_64": {"cublaslt": LT, "cublaslt_us": 2.5}}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(cublaslt_version=130100), entries)))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tmp_path / "none.json"))
    rows = sorted(tables.table_rows(tables.load_table_for(FACTS_LT)))
    fields = [21, 18, 8, 1, 0, 0, 0, 0, 2]
    assert rows == [("nn", "bf16", 8, 64, 64, "", 0, 0, 0, fields, []),
                    ("nt", "bf16", 8, 64, 64, "", 0, 0, 0, fields, []), ("nt", "fp16", 64, 64, 64, "k", 0, 0, 0, [], [])]


def test_configurations_of_another_cublaslt_are_dropped_with_one_warning(tmp_path, monkeypatch):
    entries = {"nn_bf16_8_64_64": {"cublaslt": LT}, "nt_fp16_64_64_64": {"kernel": "k", "cublaslt": LT,
                                                                         "cublaslt_near": [{"cublaslt": LT}]}}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(cublaslt_version=120900), entries)))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tmp_path / "none.json"))
    with pytest.warns(RuntimeWarning, match="cuBLASLt 120900.*this is cuBLASLt 130100") as caught:
        table = tables.load_table_for(FACTS_LT)
    assert len(caught) == 1
    assert tables.table_rows(table) == [("nt", "fp16", 64, 64, 64, "k", 0, 0, 0, [], [])]  # the kernel stays
    assert table.entries == {"nt_fp16_64_64_64": {"kernel": "k"}}  # the near-ties went with the configuration


def test_a_configuration_missing_a_field_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="lacks"):
        tables.cublaslt_fields({"cublaslt": {"algo_id": 1}})


def test_the_users_tuned_table_overlays_the_shipped_one(tmp_path, monkeypatch):
    shipped = write_table(tmp_path, make_header(cublaslt_version=130100),
                          {"nt_fp16_64_64_64": {"kernel": "k"}, "nt_fp16_8_64_64": {"kernel": "k"}})
    tuned = tmp_path / "tuned" / "t.json"
    tuned.parent.mkdir()
    tuned.write_text(json.dumps({"header": make_header(cublaslt_version=130100),
                                 "entries": {"nt_fp16_8_64_64": {"cublaslt": LT}, "nt_fp16_1_64_64": {"cublaslt": LT}}}))
    monkeypatch.setenv("CUDAL2_TABLE", str(shipped))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tuned))
    table = tables.load_table_for(FACTS_LT)
    assert table.header["tuned_overlay"] == str(tuned)
    assert {k: bool(e.get("kernel")) for k, e in table.entries.items()} == {
        "nt_fp16_64_64_64": True, "nt_fp16_8_64_64": False, "nt_fp16_1_64_64": False}


def test_tuned_table_default_location_follows_the_gpu(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDAL2_TUNED_TABLE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tables.tuned_table_file(FACTS) == tmp_path / "cudal2" / "tables" / "sm90" / "nvidia_h100_80gb_hbm3.json"


@pytest.mark.parametrize("value,scope", [*((name, name) for name in tables.LT_RULE_SCOPES), (True, "all"),
                                         (False, "off"), (None, "off")])
def test_the_cublaslt_rule_scope_round_trips_through_the_header(tmp_path, monkeypatch, value, scope):
    """rules.nearest_m_cublaslt names the M classes the nearest-M cuBLASLt rule serves; old headers' true / false
    read as "all" / "off", a header without it as "off"."""
    rules = {"nearest_m_up": False} if value is None else {"nearest_m_up": False, "nearest_m_cublaslt": value}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(rules=rules), {})))
    monkeypatch.setenv("CUDAL2_TUNED_TABLE", str(tmp_path / "none.json"))
    assert tables.load_table_for(FACTS).nearest_m_cublaslt == scope


def test_an_unknown_cublaslt_rule_scope_is_rejected_with_a_warning(tmp_path, monkeypatch):
    rules = {"nearest_m_cublaslt": "odd_m"}
    monkeypatch.setenv("CUDAL2_TABLE", str(write_table(tmp_path, make_header(rules=rules), {})))
    with pytest.warns(RuntimeWarning, match="nearest_m_cublaslt is 'odd_m'"):
        assert tables.load_table_for(FACTS) is None


def test_m_classes_and_the_scope_of_each_set_of_classes():
    assert tables.m_class(tables.M_ALIGNMENT * 3) == "aligned_m"
    assert tables.m_class(tables.M_ALIGNMENT * 3 + 1) == tables.m_class(1) == "unaligned_m"
    for name, classes in tables.LT_RULE_SCOPES.items():
        assert tables.lt_rule_scope(classes) == name
    with pytest.raises(ValueError, match="unknown M classes"):
        tables.lt_rule_scope(["odd_m"])


@pytest.mark.skipif(not cudal2_ops.is_compiled(), reason="compiled extension not built")
def test_the_extension_takes_every_cublaslt_rule_scope_and_names_a_bad_one():
    from cudal2_ops._extension import _C

    unused_device = 63  # the dispatcher's last device slot: installing an empty table there changes no decision
    for scope in tables.LT_RULE_SCOPES:
        assert _C.set_table(unused_device, [], False, scope) == []
    with pytest.raises(RuntimeError, match="nearest_m_cublaslt must be"):
        _C.set_table(unused_device, [], False, "odd_m")
