"""The install carries every package a command runs from (`python -m search`, `python -m studies.findings`, ...)
with the data files they read, and those commands start from any folder, not only the repository root."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"cudal2_ops", "cudal2_catalog", "cudal2_testing", "search", "benchmarks", "studies"}


@pytest.fixture(scope="module")
def egg_info(tmp_path_factory) -> Path:
    """The packaging metadata setup.py writes (egg_info: no compilation), outside the tree."""
    out = tmp_path_factory.mktemp("egg")
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0a")}
    done = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (info,) = out.glob("*.egg-info")
    return info


def test_the_install_lists_every_package(egg_info):
    assert set((egg_info / "top_level.txt").read_text().split()) == PACKAGES


def test_the_install_carries_the_modules_and_data_the_commands_read(egg_info):
    sources = set((egg_info / "SOURCES.txt").read_text().split())
    for package in PACKAGES:
        modules = {str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")}
        assert modules <= sources, f"{package}: not installed: {sorted(modules - sources)[:5]}"
    assert {"cudal2_testing/measure/llm_shapes.json", "search/llm/gpu_memory.md"} <= sources


@pytest.mark.parametrize("module, usage", [("search", "usage: python -m search"),
                                           ("studies.findings", "usage: python -m studies.findings"),
                                           ("cudal2_catalog.codegen", "usage: python -m cudal2_catalog.codegen")])
def test_commands_start_from_another_folder(module, usage):
    """From `/` with the installed packages on the path (PYTHONPATH stands in for the editable install here)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd="/", env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(usage)


def test_a_run_without_a_store_says_where_its_store_went(tmp_path):
    (tmp_path / "shapes.txt").write_text("64 4096 4096\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "search", "run", "--shapes", "shapes.txt", "--budget-evals", "4",
                           "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    store = tmp_path / "search.db"
    assert store.exists() and f"store is {store}" in done.stdout
