"""The compile farm's defences before anything is loaded, on cheats written to get past the scan of the source as
written: the preprocessed scan (token pasting, macros), the include check (host files, the project's own files,
devices through a macro) with the time and memory bounds, and the object check behind both. Needs nvcc (no GPU)."""
from __future__ import annotations

import time

import pytest

from search.candidate import Candidate
from search.compile_farm import REFUSED, CompileFarm
from search.llm import static_scan
from search.source_build import FAILED, REJECTED, build_source_object
from search_abi_kernels import naive_source
from search_cheat_kernels import ENDLESS_INCLUDE, INCLUDE_CHEATS, OBJECT_CHEATS, PREPROCESSOR_CHEATS

EXPECTED = {"pasted_stream_create": static_scan.STREAMS, "pasted_per_thread_stream": static_scan.STREAMS,
            "macro_default_stream": static_scan.STREAMS, "pasted_device_sync": static_scan.SYNC,
            "pasted_dlsym": static_scan.LOADING, "macro_fp16_accumulator": static_scan.FP16_ACCUMULATION}


def build(tmp_path, label: str, text: str):
    source = tmp_path / label / "sm80" / f"{label}.cu"
    source.parent.mkdir(parents=True)
    source.write_text(text)
    return build_source_object(source, "sm80", ["80"], tmp_path / label / f"{label}.o", compile_timeout_s=120)


def test_an_honest_source_builds(tmp_path, kernel_toolchain):
    built = build(tmp_path, "naive", naive_source("naive"))
    assert built.ok, built.reasons
    assert (tmp_path / "naive" / "naive.o").exists()


@pytest.mark.parametrize("label", sorted(PREPROCESSOR_CHEATS))
def test_what_the_preprocessor_makes_is_scanned(tmp_path, kernel_toolchain, label):
    assert static_scan.scan(PREPROCESSOR_CHEATS[label]) == []      # the source as written looks clean
    built = build(tmp_path, label, PREPROCESSOR_CHEATS[label])
    assert built.status == REJECTED and any(EXPECTED[label] in r for r in built.reasons), built.reasons
    assert all(r.startswith(("host pass: line ", "device pass 800: line ")) for r in built.reasons)
    assert not (tmp_path / label / f"{label}.o").exists()   # refused before the compile


@pytest.mark.parametrize("label", sorted(INCLUDE_CHEATS))
def test_includes_outside_the_allowed_folders_are_refused(tmp_path, kernel_toolchain, label):
    start = time.monotonic()
    built = build(tmp_path, label, INCLUDE_CHEATS[label])
    assert built.status == REJECTED and "#include of" in built.reasons[0], built.reasons
    assert built.log == ""            # nothing of the included file is kept
    assert time.monotonic() - start < 30


def test_an_endless_include_is_bounded(tmp_path, kernel_toolchain):
    start = time.monotonic()
    built = build(tmp_path, "endless", ENDLESS_INCLUDE)
    assert built.status in (REJECTED, FAILED) and "preprocessing" in built.reasons[0], built.reasons
    assert time.monotonic() - start < 60


def test_the_object_check_catches_what_no_scan_sees(tmp_path, kernel_toolchain):
    source, what = OBJECT_CHEATS["static_initializer"]
    assert static_scan.scan(source) == []
    built = build(tmp_path, "boot", source)
    assert built.status == REJECTED and any(what in r for r in built.reasons), built.reasons
    assert all(r.startswith("object: ") for r in built.reasons)


def test_the_farm_marks_refusals(tmp_path, kernel_toolchain):
    farm = CompileFarm(tmp_path / "artifacts", ["80"], jobs=2)
    cheat = Candidate(source=PREPROCESSOR_CHEATS["pasted_dlsym"], source_name="cheat_pasted_dlsym")
    oversized = Candidate(source=naive_source("big") + "// " + "x" * 200_000, source_name="big")
    outcomes = farm.compile([cheat, oversized])
    for cand in (cheat, oversized):
        assert not outcomes[cand.build_key].ok and outcomes[cand.build_key].log.startswith(REFUSED)
    assert "limit" in outcomes[oversized.build_key].log
    log_file = tmp_path / "artifacts" / f"{cheat.build_key}.log"
    assert log_file.read_text().startswith(REFUSED)
