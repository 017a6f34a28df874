"""The GPU kernel tests' library variable: CUDAL2_TEST_KERNEL_LIB, the old CUDAL2_KERNEL_LIB read with a warning."""
import pytest

from kernel_lib_under_test import ENV, OLD_ENV, kernel_lib_path


def test_new_name_is_read_silently_and_wins(monkeypatch, recwarn):
    monkeypatch.setenv(ENV, "/new.so")
    monkeypatch.setenv(OLD_ENV, "/old.so")
    assert kernel_lib_path() == "/new.so"
    assert not recwarn.list


def test_old_name_still_works_with_a_warning(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(OLD_ENV, "/old.so")
    with pytest.warns(FutureWarning, match="CUDAL2_KERNEL_LIB is renamed CUDAL2_TEST_KERNEL_LIB"):
        assert kernel_lib_path() == "/old.so"


def test_unset_means_none(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(OLD_ENV, raising=False)
    assert kernel_lib_path() is None
