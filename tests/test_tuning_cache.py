"""The cuBLASLt tuning file: validators must match, writes are atomic and merge."""
import pytest

from cudal2_ops import tuning_cache

VALIDATORS = {"format": 1, "gpu_name": "G", "driver": 1, "cuda": "13.0", "cublaslt": 130000}


def test_round_trip(tmp_path):
    path = tmp_path / "t.json"
    tuning_cache.write_entries(path, VALIDATORS, {"k": {"algo": "00", "us": 1.0}})
    assert tuning_cache.read_entries(path, VALIDATORS) == {"k": {"algo": "00", "us": 1.0}}
    assert not list(tmp_path.glob(".*.tmp"))


def test_mismatch_is_ignored_with_warning(tmp_path):
    path = tmp_path / "t.json"
    tuning_cache.write_entries(path, VALIDATORS, {"k": {"algo": "00", "us": 1.0}})
    with pytest.warns(RuntimeWarning, match="ignoring tuning file"):
        assert tuning_cache.read_entries(path, dict(VALIDATORS, cublaslt=1)) == {}


def test_unreadable_file_is_ignored_with_warning(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("{")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert tuning_cache.read_entries(path, VALIDATORS) == {}


def test_location_override(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_TUNE_FILE", str(tmp_path / "x.json"))
    assert tuning_cache.tuning_file() == tmp_path / "x.json"


def test_missing_file_gives_no_entries(tmp_path):
    assert tuning_cache.read_entries(tmp_path / "none.json", VALIDATORS) == {}
