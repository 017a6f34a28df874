"""`python -m cudal2_ops`: info and check run without a GPU and say so; bad commands fail."""
import json
import subprocess
import sys

import pytest
import torch


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
