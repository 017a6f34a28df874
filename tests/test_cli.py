"""`python -m cudal2_ops`: info and check run without a GPU and say so; bad commands fail. Every command-line entry
point's --help names the command a user types."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudal2_ops", *args], capture_output=True, text=True, timeout=300)


def test_info_reports_build_and_gpu():
    proc = run_cli("info")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["torch"] == torch.__version__
    assert "extension" in info and "kernels" in info
    if not torch.cuda.is_available():
        assert "none visible" in info["gpu"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only message is for machines without a GPU")
def test_check_and_bench_without_gpu_say_so():
    proc = run_cli("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no CUDA GPU visible" in proc.stdout
    assert "checks passed" in proc.stdout
    bench = run_cli("bench")
    assert bench.returncode == 0 and "nothing to benchmark" in bench.stdout


def test_unknown_command_fails():
    assert run_cli("frobnicate").returncode != 0


ENTRY_POINT_FOLDERS = ("cudal2_ops", "search", "benchmarks", "build_tools", "scripts")


def entry_point_command(path: Path) -> str:
    """The command a user types for the entry point in `path` (relative to the repository root): `python3 scripts/x.py`
    outside packages, `python -m pkg` for a package's __main__.py or the cli.py it runs, else `python -m pkg.module`."""
    if path.parts[0] == "scripts":  # not a package: run by path
        return f"python3 {path.as_posix()}"
    main_module = REPO_ROOT / path.parent / "__main__.py"
    runs_package = path.name == "__main__.py" or (path.stem == "cli" and main_module.exists())
    return "python -m " + ".".join(path.parent.parts if runs_package else path.with_suffix("").parts)


def argument_parser_progs(source: str) -> list[str | None]:
    """The `prog=` of every argparse.ArgumentParser(...) call in `source` (None where it is not given)."""
    progs = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "ArgumentParser":
            prog = next((kw.value for kw in node.keywords if kw.arg == "prog"), None)
            progs.append(prog.value if isinstance(prog, ast.Constant) else None)
    return progs


def test_every_entry_point_names_its_real_command():
    """`--help` says `usage: python -m search.sweep`, not `usage: sweep.py`, for every command-line entry point."""
    checked = 0
    for folder in ENTRY_POINT_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT)
            for prog in argument_parser_progs(path.read_text()):
                assert prog == entry_point_command(relative), f"{relative}: ArgumentParser(prog={prog!r})"
                checked += 1
    assert checked >= 10


def test_help_shows_the_module_command():
    proc = subprocess.run([sys.executable, "-m", "search.sweep", "--help"], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m search.sweep ")
