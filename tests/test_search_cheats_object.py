"""The object check on compiled candidates (nvcc, no GPU): constructors, static initialisers, state kept between
calls, and undefined symbols outside the allowlist are each refused with their reason; honest objects pass."""
from __future__ import annotations

import subprocess

import pytest

from build_tools import kernel_lib
from search.elf_object import ElfObject
from search.object_check import check_object
from search_abi_kernels import naive_source
from search_cheat_kernels import OBJECT_CHEATS


def compile_object(tmp_path, label: str, text: str):
    """The object of `text` compiled as the compile farm compiles an sm80 source (no scan, no checks)."""
    source = tmp_path / f"{label}.cu"
    source.write_text(text)
    obj = tmp_path / f"{label}.o"
    flags = kernel_lib.common_flags() + kernel_lib.gencode_flags("sm80", ["80"])
    proc = subprocess.run([kernel_lib.nvcc_path(), *flags, "-c", str(source), "-o", str(obj)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return obj


def test_an_honest_object_passes(tmp_path, kernel_toolchain):
    obj = compile_object(tmp_path, "naive", naive_source("naive"))
    assert check_object(obj) == []
    elf = ElfObject.read(obj)
    assert "__cudaRegisterFunction" in elf.undefined() and elf.section(".init_array").size == 8


@pytest.mark.parametrize("label", sorted(OBJECT_CHEATS))
def test_each_object_cheat_is_refused(tmp_path, kernel_toolchain, label):
    source, what = OBJECT_CHEATS[label]
    problems = check_object(compile_object(tmp_path, label, source))
    assert any(what in p for p in problems), problems


def test_a_file_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "x.o").write_bytes(b"#!/bin/sh\necho hi\n")
    (problem,) = check_object(tmp_path / "x.o")
    assert "cannot read x.o" in problem and "not an ELF file" in problem
