"""`python -m search`'s argument handling: prog, arch and shape-set parsing, and errors that say what is supported
(every bad input as the CLI answers it: tests/test_search_cli_errors.py)."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from search import __main__ as cli
from search import cli_args
from search.errors import UserError
from search.loop import RunArgs

REPO = Path(__file__).resolve().parent.parent


def test_help_names_the_real_command():
    assert cli.parser().prog == "python -m search"
    out = subprocess.run([sys.executable, "-m", "search", "run", "--help"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    for flag in ("--budget-evals", "--policy", "--backend", "--compile-only", "--max-builds", "--shapes"):
        assert flag in out


@pytest.mark.parametrize("text, arch", [("sm90", 90), ("sm_80", 80), ("sm90a", 90), ("sm89", 89)])
def test_arch_spellings(text, arch):
    assert cli_args.arch(text) == arch


@pytest.mark.parametrize("text, needle", [("hopper", "sm90"), ("sm75", "sm80 to sm90"), ("sm100", "sm80 to sm90")])
def test_bad_arch_is_refused(text, needle):
    with pytest.raises(argparse.ArgumentTypeError, match=needle):
        cli_args.arch(text)


@pytest.mark.parametrize("text, value", [("7", 7), (" 12 ", 12), ("+3", 3)])
def test_integers(text, value):
    assert cli_args.integer(1)(text) == value


@pytest.mark.parametrize("text", ["64.7", "true", "1e3", "1_000", "0x10", "", "0"])
def test_not_integers_or_out_of_range(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli_args.integer(1)(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-0.5", "1.5", "half"])
def test_numbers_outside_a_finite_range(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli_args.number(0, 1)(text)
    assert cli_args.number(0, 1)("0.25") == 0.25 and cli_args.number(0, low_open=True)("1e-3") == 1e-3


def test_shape_sets(tmp_path):
    assert len(cli_args.load_shapes("g1000", 0)) == 1000
    sample = cli_args.load_shapes("sample40", 3)
    assert len(sample) == 40 and sample == cli_args.load_shapes("sample40", 3)
    lines = tmp_path / "shapes.txt"
    lines.write_text("64 128 256\n# a comment\n\n1,2,3  # inline\n")
    assert cli_args.load_shapes(str(lines), 0) == [(64, 128, 256), (1, 2, 3)]
    doc = tmp_path / "shapes.json"
    doc.write_text("[[8, 16, 32],\n [1, 1, 1]]")
    assert cli_args.load_shapes(str(doc), 0) == [(8, 16, 32), (1, 1, 1)]
    assert cli_args.load_shapes(f"{lines}+{doc}+{lines}", 0) == [(64, 128, 256), (1, 2, 3), (8, 16, 32), (1, 1, 1)]
    assert cli_args.load_shapes(f"{lines}+{doc}", 0, max_log2_mnk=12) == [(1, 2, 3), (1, 1, 1)]


def test_shape_union_below_a_size():
    union = cli_args.load_shapes("g1000+llm", 0)
    assert len(union) == len(set(union)) > 1000 and union[:1000] == cli_args.load_shapes("g1000", 0)
    small = cli_args.load_shapes("g1000+llm", 0, max_log2_mnk=32)
    assert small == [s for s in union if s[0] * s[1] * s[2] < 2**32] and any(m <= 64 for m, _, _ in small)
    with pytest.raises(UserError, match="none below"):
        cli_args.load_shapes("g1000", 0, max_log2_mnk=2)


def test_bad_shape_sets_say_what_is_supported(tmp_path):
    with pytest.raises(UserError, match="sampleN"):
        cli_args.load_shapes("g2000", 0)
    bad = tmp_path / "bad.txt"
    bad.write_text("64 128 256\n64 128\n")
    with pytest.raises(UserError, match="bad.txt: line 2: expected three positive integers"):
        cli_args.load_shapes(str(bad), 0)
    bad.write_text('[[1, 2, 3],\n  [4, 5, 6],\n  [7, 8, "9"]]')
    with pytest.raises(UserError, match="line 3: expected three integers"):
        cli_args.load_shapes(str(bad), 0)


def test_run_args_need_a_budget_and_a_known_policy():
    with pytest.raises(UserError, match="budget"):
        RunArgs()
    with pytest.raises(ValueError, match="rl"):
        RunArgs(policy="greedy", budget_evals=1)


def test_local_backend_needs_an_artifacts_folder(tmp_path, capsys):
    assert cli.main(["run", "--backend", "local", "--budget-evals", "1", "--quiet", "--store",
                     str(tmp_path / "s.db")]) == 2
    assert "--backend local needs --artifacts DIR" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()
