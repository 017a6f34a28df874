"""The GPU kernel tests' library: CUDAL2_TEST_KERNEL_LIB (the old CUDAL2_KERNEL_LIB read with a warning), else the
library the build installed beside cudal2_ops, else a loud failure."""
import pytest

import kernel_lib_under_test
from cudal2_ops import _extension
from kernel_lib_under_test import ENV, OLD_ENV, kernel_lib_path, library_under_test


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


def test_unset_means_the_installed_library(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(OLD_ENV, raising=False)
    installed = tmp_path / "libcudal2_kernels.so"
    monkeypatch.setattr(_extension, "KERNEL_LIB", installed)
    assert kernel_lib_path() is None                      # not built (CUDAL2_SKIP_KERNELS=1)
    installed.write_bytes(b"")
    assert kernel_lib_path() == str(installed)


def test_a_gpu_run_without_any_library_fails_naming_both_ways(monkeypatch):
    monkeypatch.setattr(kernel_lib_under_test, "kernel_lib_path", lambda: None)
    with pytest.raises(RuntimeError, match="CUDAL2_TEST_KERNEL_LIB is not set and the build installed none"):
        library_under_test()
    monkeypatch.setattr(kernel_lib_under_test, "kernel_lib_path", lambda: "/lib.so")
    assert library_under_test() == "/lib.so"
