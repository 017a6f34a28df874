"""scripts/main.sh builds the extension only where no GPU is visible (and says how to build the kernels anyway);
scripts/test.sh and .ci/run always build the kernels. Run with a stand-in Python that records each call, so
nothing is installed or compiled."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Answers as a machine would: FAKE_TORCH = gpu | nogpu | missing (torch not importable); install_stamp says a build
# is due, so install.sh runs setup.py; every call is logged with the CUDAL2_SKIP_KERNELS it saw.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$* |skip=${CUDAL2_SKIP_KERNELS-unset}" >> "$FAKE_LOG"
case "$*" in
  *torch.cuda.is_available*) case $FAKE_TORCH in gpu) exit 0 ;; nogpu) exit 3 ;; *) exit 1 ;; esac ;;
  "-c import torch") [ "$FAKE_TORCH" != missing ] ;;
  "-m build_tools.install_stamp check") echo "no build/install.stamp (first build)"; exit 1 ;;
  "-m build_tools.kernel_lib --estimate") echo "61 kernels for 80;90a, 61 to compile: about 19m50s with 2 jobs" ;;
esac
"""


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_script(tmp_path: Path, script: str, torch_state: str, nvidia_smi_rc: int = 1, **env: str):
    """Runs `script` with the stand-in Python (and an nvidia-smi exiting with `nvidia_smi_rc`); returns the process
    and the logged calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = write_executable(bin_dir / "fake-python", FAKE_PYTHON)
    write_executable(bin_dir / "nvidia-smi", f"#!/usr/bin/env bash\nexit {nvidia_smi_rc}\n")
    log = tmp_path / "calls.log"
    full_env = {k: v for k, v in os.environ.items() if k != "CUDAL2_SKIP_KERNELS"}
    full_env.update(PYTHON=str(python), FAKE_LOG=str(log), FAKE_TORCH=torch_state,
                    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env)
    proc = subprocess.run(["bash", script], capture_output=True, text=True, cwd=REPO_ROOT, env=full_env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, log.read_text().splitlines()


def build_call(calls: list[str]) -> str:
    """The logged setup.py call (exactly one)."""
    builds = [c for c in calls if c.startswith("setup.py")]
    assert len(builds) == 1, calls
    return builds[0]


def test_main_without_a_gpu_builds_the_extension_only_and_says_how_to_build_the_kernels(tmp_path):
    proc, calls = run_script(tmp_path, "scripts/main.sh", "nogpu")
    assert build_call(calls).endswith("|skip=1")
    assert "building the extension without the kernel library (CUDAL2_SKIP_KERNELS=1)" in proc.stdout
    assert ("To build the kernel library anyway (61 kernels for 80;90a, 61 to compile: about 19m50s with 2 jobs): "
            "CUDAL2_SKIP_KERNELS=0 ./scripts/main.sh") in proc.stdout
    assert not any(c.startswith("-m cudal2_ops bench") for c in calls)
    assert any(c.startswith("-m cudal2_ops check") for c in calls)


def test_main_with_a_gpu_builds_the_kernels_and_benchmarks(tmp_path):
    proc, calls = run_script(tmp_path, "scripts/main.sh", "gpu")
    assert build_call(calls).endswith("|skip=unset")
    assert any(c.startswith("-m cudal2_ops bench") for c in calls)
    assert "CUDAL2_SKIP_KERNELS" not in proc.stdout


@pytest.mark.parametrize("choice", ["0", "1"])
def test_main_keeps_the_callers_choice(tmp_path, choice):
    proc, calls = run_script(tmp_path, "scripts/main.sh", "nogpu", CUDAL2_SKIP_KERNELS=choice)
    assert build_call(calls).endswith(f"|skip={choice}")
    assert "To build the kernel library anyway" not in proc.stdout


@pytest.mark.parametrize("nvidia_smi_rc,skip", [(0, "unset"), (9, "1")])
def test_main_before_torch_is_installed_asks_nvidia_smi(tmp_path, nvidia_smi_rc, skip):
    _, calls = run_script(tmp_path, "scripts/main.sh", "missing", nvidia_smi_rc=nvidia_smi_rc)
    assert build_call(calls).endswith(f"|skip={skip}")


@pytest.mark.parametrize("script", ["scripts/test.sh", ".ci/run"])
def test_the_test_command_and_ci_build_every_kernel_without_a_gpu(tmp_path, script):
    _, calls = run_script(tmp_path, script, "nogpu")
    assert build_call(calls).endswith("|skip=unset")
    assert calls[-1].startswith("-m pytest -q tests")


def test_ci_builds_every_kernel_whatever_the_environment_says(tmp_path):
    _, calls = run_script(tmp_path, ".ci/run", "nogpu", CUDAL2_SKIP_KERNELS="1")
    assert build_call(calls).endswith("|skip=unset")
