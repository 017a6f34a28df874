"""The install's skip logic (build_tools/install_stamp.py), its dependency lists (build_tools/requirements.py) and
scripts/install.sh on a tree whose build is current: a second run builds and installs nothing."""
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_tools import install_stamp, requirements

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A small source tree with built outputs, installed (as far as the stamp can tell) and stamped."""
    for name, text in {"setup.py": "setup()\n", "pyproject.toml": "[build-system]\n", "csrc/ops.cpp": "int f();\n",
                       "csrc/include/cudal2/abi.h": "#pragma once\n", "kernels/sm90/k.cu": "// kernel\n",
                       "kernels/sm90/h100.json": "{}\n", "build_tools/kernel_lib.py": "\n", "README.md": "# doc\n",
                       "tests/test_x.py": "\n", "cudal2_ops/_C.cpython-311-x86_64-linux-gnu.so": "binary",
                       "cudal2_ops/libcudal2_kernels.so": "kernels", "cudal2_ops/tables/sm90/h100.json": "{}\n"}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(install_stamp, "installed_editable_from", lambda root: True)
    for name in install_stamp.BUILD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    install_stamp.write_stamp(tmp_path)
    return tmp_path


def test_unchanged_tree_is_current(tree):
    assert install_stamp.why_stale(tree) is None


@pytest.mark.parametrize("changed", ["csrc/ops.cpp", "csrc/include/cudal2/abi.h", "kernels/sm90/k.cu",
                                     "kernels/sm90/h100.json", "setup.py", "pyproject.toml", "build_tools/kernel_lib.py"])
def test_an_edited_input_needs_a_build(tree, changed):
    (tree / changed).write_text((tree / changed).read_text() + "// edited\n")
    assert "inputs changed" in install_stamp.why_stale(tree)


def test_an_added_source_needs_a_build(tree):
    (tree / "kernels" / "sm80").mkdir()
    (tree / "kernels" / "sm80" / "new.cu").write_text("// new kernel\n")
    assert "inputs changed" in install_stamp.why_stale(tree)


def test_files_the_build_does_not_read_change_nothing(tree):
    (tree / "README.md").write_text("# edited\n")
    (tree / "tests" / "test_x.py").write_text("# edited\n")
    (tree / "build_tools" / "__pycache__").mkdir()
    (tree / "build_tools" / "__pycache__" / "kernel_lib.cpython-311.pyc").write_bytes(b"\0")
    os.utime(tree / "csrc" / "ops.cpp")  # a checkout touches files without changing them
    assert install_stamp.why_stale(tree) is None


@pytest.mark.parametrize("name", ["TORCH_CUDA_ARCH_LIST", "CUDAL2_KERNELS", "CUDAL2_SKIP_KERNELS"])
def test_a_build_setting_needs_a_build(tree, monkeypatch, name):
    monkeypatch.setenv(name, "9.0a")
    assert "inputs changed" in install_stamp.why_stale(tree)


def test_a_deleted_or_rebuilt_output_needs_a_build(tree):
    library = tree / "cudal2_ops" / "libcudal2_kernels.so"
    library.write_text("kernels, relinked")
    assert "cudal2_ops/libcudal2_kernels.so" in install_stamp.why_stale(tree)
    install_stamp.write_stamp(tree)
    (tree / "cudal2_ops" / "_C.cpython-311-x86_64-linux-gnu.so").unlink()
    assert "_C.cpython-311-x86_64-linux-gnu.so" in install_stamp.why_stale(tree)


def test_no_stamp_a_bad_stamp_or_no_install_needs_a_build(tree, monkeypatch):
    stamp = tree / install_stamp.STAMP_PATH
    stamp.write_text("{not json")
    assert "unreadable" in install_stamp.why_stale(tree)
    stamp.unlink()
    assert "first build" in install_stamp.why_stale(tree)
    install_stamp.write_stamp(tree)
    monkeypatch.setattr(install_stamp, "installed_editable_from", lambda root: False)
    assert "not installed in editable mode" in install_stamp.why_stale(tree)


def test_installed_editable_from_another_tree_is_false(tmp_path):
    assert not install_stamp.installed_editable_from(tmp_path)


def test_test_extras_hold_the_search_dependencies():
    assert requirements.requirements(["test", "ray"]) == ["pytest", "hypothesis", "ray"]
    with pytest.raises(ValueError, match="unknown extra.*known"):
        requirements.requirements(["tests"])


def test_missing_lists_only_what_cannot_be_imported(monkeypatch):
    monkeypatch.setitem(requirements.EXTRAS, "probe", ["pytest", "no-such-module-cudal2>=1", requirements.CUTLASS])
    assert requirements.import_name(requirements.CUTLASS) == "cutlass_library"
    assert requirements.missing(["probe"]) == ["no-such-module-cudal2>=1"]
    cutlass_here = importlib.util.find_spec("cutlass_library") is not None
    assert requirements.missing(["probe"], without_dependencies=True) == ([] if cutlass_here else [requirements.CUTLASS])


def test_core_paths_do_not_import_the_optional_extras():
    code = "import sys, cudal2_ops, search; print(sorted({'openai', 'ray'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_second_install_on_a_current_tree_builds_nothing_quickly():
    """The set-up of a second scripts/main.sh or scripts/test.sh: checks only, no pip, no compiler."""
    check = subprocess.run(["bash", "scripts/install.sh", "--check"], capture_output=True, text=True, cwd=REPO_ROOT,
                           timeout=300)
    if check.returncode != 0:
        pytest.skip(f"this tree's build is not current ({check.stdout.strip()}): run scripts/install.sh first")
    start = time.monotonic()
    proc = subprocess.run(["bash", "scripts/install.sh"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing to build" in proc.stdout
    assert elapsed < 15, f"second install took {elapsed:.1f} s"
