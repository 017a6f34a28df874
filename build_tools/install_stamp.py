"""Whether this tree's build and editable install are current, so that scripts/install.sh skips pip and the build.

After a successful install, `write` records in build/install.stamp a digest of everything the build reads (sources,
kernels, tables, build scripts, the environment variables and tools that change its output) and the size and time
of every file it produced. `check` finds the install current when the digest is the same, the outputs are the
files recorded, and the Python running it has this tree installed (editable).

    python -m build_tools.install_stamp check    # exit 0: current; exit 1: prints why a build is needed
    python -m build_tools.install_stamp write    # after a successful build and install
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STAMP_PATH = Path("build") / "install.stamp"
# What the build reads, relative to the repository root: files, and folders read whole.
INPUT_FILES = ("setup.py", "pyproject.toml")
INPUT_FOLDERS = ("csrc", "kernels", "build_tools")
# Environment variables that change what setup.py builds (see its docstring and build_tools/kernel_lib.py).
BUILD_ENV_VARS = ("TORCH_CUDA_ARCH_LIST", "CUDAL2_KERNELS", "CUDAL2_SKIP_KERNELS", "CUTLASS_DIR", "CUDA_HOME",
                  "CUDA_PATH")
# Distributions whose version changes the build: the extension links against torch; the kernels include CUTLASS.
BUILD_DISTRIBUTIONS = ("torch", "nvidia-cutlass", "setuptools")
# Files the build writes into the package, relative to the repository root.
OUTPUT_PATTERNS = ("cudal2_ops/_C*.so", "cudal2_ops/libcudal2_kernels.so", "cudal2_ops/tables/*/*.json")


def input_files(root: Path) -> list[Path]:
    """Every file the build reads under `root`, sorted (bytecode caches left out)."""
    files = [root / name for name in INPUT_FILES if (root / name).is_file()]
    for folder in INPUT_FOLDERS:
        files += [p for p in (root / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(files)


def distribution_version(name: str) -> str | None:
    """The installed version of distribution `name`, None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def inputs_digest(root: Path) -> str:
    """sha256 over the build's input files (path and content), its environment variables, the Python, nvcc and the
    versions of the distributions it builds against."""
    h = hashlib.sha256()
    for path in input_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    setting = {"env": {name: os.environ.get(name) for name in BUILD_ENV_VARS},
               "python": sys.executable, "nvcc": shutil.which("nvcc"),
               "distributions": {name: distribution_version(name) for name in BUILD_DISTRIBUTIONS}}
    h.update(json.dumps(setting, sort_keys=True).encode())
    return h.hexdigest()


def output_files(root: Path) -> dict[str, list[int]]:
    """The build's outputs under `root`: relative path -> [size, mtime_ns]."""
    found = {}
    for pattern in OUTPUT_PATTERNS:
        for path in root.glob(pattern):
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    return dict(sorted(found.items()))


def installed_editable_from(root: Path) -> bool:
    """True when the running Python has cudal2_ops installed in editable mode from `root`."""
    for dist in importlib.metadata.distributions(name="cudal2_ops"):
        direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
        if direct_url.get("dir_info", {}).get("editable") and direct_url.get("url") == root.resolve().as_uri():
            return True
    return False


def write_stamp(root: Path = REPO_ROOT) -> Path:
    """Records the current inputs and outputs in root/build/install.stamp; returns its path."""
    stamp = root / STAMP_PATH
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"inputs": inputs_digest(root), "outputs": output_files(root)}, indent=1) + "\n")
    return stamp


def why_stale(root: Path = REPO_ROOT) -> str | None:
    """Why the build and install of `root` must run again, or None when they are current."""
    stamp = root / STAMP_PATH
    if not stamp.exists():
        return f"no {STAMP_PATH} (first build)"
    try:
        recorded = json.loads(stamp.read_text())
        recorded_inputs, recorded_outputs = recorded["inputs"], recorded["outputs"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return f"{STAMP_PATH} is unreadable"
    if recorded_inputs != inputs_digest(root):
        return "the build's inputs changed (sources, kernels, tables, build scripts, environment or toolchain)"
    outputs = output_files(root)
    if outputs != recorded_outputs:
        changed = sorted(k for k in outputs.keys() | recorded_outputs.keys() if outputs.get(k) != recorded_outputs.get(k))
        return f"built files changed, added or missing: {', '.join(changed)}"
    if not installed_editable_from(root):
        return f"cudal2_ops is not installed in editable mode from {root} for {sys.executable}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m build_tools.install_stamp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("check", "write"))
    args = parser.parse_args()
    if args.command == "write":
        print(f"cudal2: recorded the build in {write_stamp()}")
        return
    reason = why_stale()
    if reason:
        print(reason)
        sys.exit(1)


if __name__ == "__main__":
    main()
