"""build_tools.kernel_lib: arch parsing, gencode flags, kernel selection and the library index source."""
import pytest

from build_tools import kernel_lib


def test_parse_arch_list():
    assert kernel_lib.parse_arch_list("8.0;9.0a") == ["80", "90a"]
    assert kernel_lib.parse_arch_list("8.0 9.0+PTX") == ["80", "90"]
    assert kernel_lib.parse_arch_list(None) == ["80", "90a"]
    with pytest.raises(ValueError, match="bad CUDA arch"):
        kernel_lib.parse_arch_list("sm_90")


def test_gencode_flags_per_folder():
    assert kernel_lib.gencode_flags("sm90", ["90a"]) == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert kernel_lib.gencode_flags("sm90", ["80"]) == []
    assert kernel_lib.gencode_flags("sm80", ["80", "90a"]) == ["-gencode=arch=compute_80,code=sm_80",
                                                                "-gencode=arch=compute_90,code=sm_90"]
    assert kernel_lib.library_archs(["80", "90a"]) == "80;90;90a"


def test_registry_source_lists_every_kernel():
    src = kernel_lib.registry_source(["k_one", "k_two"], "90a")
    assert 'extern "C" const cudal2_kernel* cudal2_kernel_k_one(void);' in src
    assert "cudal2_kernel_k_two()," in src
    assert "*count = 2;" in src
    assert '"90a"' in src


def test_select_kernel_names_filters_by_wildcards(monkeypatch):
    monkeypatch.setattr(kernel_lib, "table_kernel_names", lambda: {"sm90_a", "sm80_b"})
    monkeypatch.setattr(kernel_lib, "default_kernel_names", lambda: {"decode_c"})
    assert kernel_lib.select_kernel_names() == ["decode_c", "sm80_b", "sm90_a"]
    assert kernel_lib.select_kernel_names("sm9*,decode_*") == ["decode_c", "sm90_a"]


def test_missing_source_is_a_clear_error():
    with pytest.raises(kernel_lib.KernelBuildError, match="no source for kernel"):
        kernel_lib.find_source("no_such_kernel")


def test_default_jobs_honours_max_jobs(monkeypatch):
    monkeypatch.setenv("MAX_JOBS", "3")
    assert kernel_lib.default_jobs() == 3


def test_object_key_follows_the_headers_a_source_includes(tmp_path, monkeypatch):
    """A kernel's key changes with the repository headers it includes (directly or through another header) and with
    nothing else in the include folder: a new header, or an edit of one it does not include, keeps it cached."""
    inc = tmp_path / "include" / "cudal2"
    inc.mkdir(parents=True)
    (inc / "abi.h").write_text("abi")
    (inc / "gemm.cuh").write_text('#include <stdint.h>\n#include "cudal2/abi.h"\n')
    (inc / "other.cuh").write_text("v1")
    monkeypatch.setattr(kernel_lib, "INCLUDE_DIR", tmp_path / "include")
    monkeypatch.setattr(kernel_lib, "nvcc_version", lambda: "nvcc")
    src = tmp_path / "sm80_cute_fp16_nt_64x64x64_s3_w4.cu"
    src.write_text('#include "cudal2/gemm.cuh"\nKERNEL()\n')
    assert kernel_lib.included_headers(src) == [inc / "abi.h", inc / "gemm.cuh"]
    before = kernel_lib.object_key(src, ["-O3", "-I/somewhere"])
    (inc / "other.cuh").write_text("v2")
    (inc / "new_shared.cuh").write_text("new")
    assert kernel_lib.object_key(src, ["-O3", "-I/elsewhere"]) == before  # include paths are not part of the key
    (inc / "abi.h").write_text("abi v2")                                   # included through gemm.cuh
    assert kernel_lib.object_key(src, ["-O3"]) != before
