"""Table files: keys, header validators (mismatch -> warning and no table), rows for the dispatcher."""
import json

import pytest

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
    assert tables.table_rows(table) == [("nt", "fp16", 64, 64, 64, "k", 2, 0, 0)]


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
            assert entry["kernel"] and entry["kernel_us"] > 0 and entry["baseline_us"] > 0
