"""`python -m search`'s argument handling: prog, arch and shape-set parsing, and errors that say what is supported."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from search import __main__ as cli
from search.loop import RunArgs

REPO = Path(__file__).resolve().parent.parent


def test_help_names_the_real_command():
    assert cli.parser().prog == "python -m search"
    out = subprocess.run([sys.executable, "-m", "search", "run", "--help"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    for flag in ("--budget-evals", "--policy", "--backend", "--compile-only", "--max-builds", "--shapes"):
        assert flag in out


@pytest.mark.parametrize("text, arch", [("sm90", 90), ("sm_80", 80), ("sm90a", 90)])
def test_arch_spellings(text, arch):
    assert cli.parse_arch(text) == arch


def test_bad_arch_is_refused():
    with pytest.raises(argparse.ArgumentTypeError, match="sm90"):
        cli.parse_arch("hopper")


def test_shape_sets(tmp_path):
    assert len(cli.load_shapes("g1000", 0)) == 1000
    sample = cli.load_shapes("sample40", 3)
    assert len(sample) == 40 and sample == cli.load_shapes("sample40", 3)
    lines = tmp_path / "shapes.txt"
    lines.write_text("64 128 256\n1,2,3\n")
    assert cli.load_shapes(str(lines), 0) == [(64, 128, 256), (1, 2, 3)]
    doc = tmp_path / "shapes.json"
    doc.write_text("[[8, 16, 32]]")
    assert cli.load_shapes(str(doc), 0) == [(8, 16, 32)]


def test_bad_shape_sets_say_what_is_supported(tmp_path):
    with pytest.raises(ValueError, match="sampleN"):
        cli.load_shapes("g2000", 0)
    bad = tmp_path / "bad.txt"
    bad.write_text("64 128\n")
    with pytest.raises(ValueError, match="three positive integers"):
        cli.load_shapes(str(bad), 0)


def test_run_args_need_a_budget_and_a_known_policy():
    with pytest.raises(ValueError, match="budget"):
        RunArgs()
    with pytest.raises(ValueError, match="rl"):
        RunArgs(policy="greedy", budget_evals=1)


def test_local_backend_needs_an_artifacts_folder(tmp_path):
    with pytest.raises(SystemExit, match="--artifacts"):
        cli.main(["run", "--backend", "local", "--budget-evals", "1", "--store", str(tmp_path / "s.db")])
