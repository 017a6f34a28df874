"""scripts/device_slim.sh: the tracked results no GPU stage reads leave the working tree for a call and come back."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEEDED = ["benchmarks/results/gpu_a/sanitize_tiny_x.json", "benchmarks/results/gpu_a/sweep_2026_x.json.gz",
          "benchmarks/results/gpu_b/search_table_x_fp16_nn.sqlite.gz", "benchmarks/results/gpu_b/tune_grid_x.json.gz"]
NOT_NEEDED = ["benchmarks/results/gpu_a/g1000_kernel_x.json.gz", "benchmarks/results/gpu_a/g1000_kernel_x.md",
              "benchmarks/results/gpu_a/plot.png", "benchmarks/results/ci/ci_run_x.log",
              "benchmarks/results/gpu_b/search_table_x_report.md"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def test_out_keeps_what_the_stages_read_and_back_restores_the_rest(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "device_slim.sh", repo / "scripts" / "device_slim.sh")
    for path in NEEDED + NOT_NEEDED + ["kernels/sm90/gpu_a.json"]:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(path)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree")
    out = subprocess.run(["bash", "scripts/device_slim.sh", "out"], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert all((repo / p).is_file() for p in NEEDED + ["kernels/sm90/gpu_a.json"])
    assert not any((repo / p).exists() for p in NOT_NEEDED)
    assert "bytes in the tracked files present" in out.stdout
    back = subprocess.run(["bash", "scripts/device_slim.sh", "back"], cwd=repo, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    assert all((repo / p).read_text() == p for p in NEEDED + NOT_NEEDED)
    assert git(repo, "status", "--short") == ""
