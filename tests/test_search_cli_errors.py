"""Every bad input to `python -m search` is refused with exit status 2 and one line on stderr naming what was wrong (no
traceback), before anything is written: no store file, lock file or report appears, and a damaged store is left as
it was with nothing beside it. (Reading a valid store lets SQLite add its WAL index files, -wal and -shm, beside it.)
A few cases run as real processes; the rest call the CLI's `main` in this process (same code path, no interpreter
start per case)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from search import __main__ as cli
from search.store import Store

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with a good shapes file, the CLI's working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shapes.txt").write_text("64 128 256\n128 256 512\n")
    return tmp_path


def refused(argv: list[str], capsys, *needles: str) -> str:
    """Runs the CLI; asserts exit status 2 and one stderr line holding every needle; returns the line."""
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def nothing_written(folder: Path, *keep: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(keep)


def run_argv(*extra: str) -> list[str]:
    return ["run", "--shapes", "shapes.txt", "--budget-evals", "4", "--store", "s.db", "--quiet", *extra]


SHAPE_FILES = {
    "words": (b"64 128 256\n64 abc 256\n", "line 2"),
    "floats": (b"64 128 256.5\n", "line 1"),
    "too few": (b"64 128\n", "line 1"),
    "zero": (b"0 128 256\n", "from 1 to"),
    "huge": (b"64 128 99999999999\n", "from 1 to"),
    "flat JSON list": (b"[64, 128, 256]", "line 1: expected [M, N, K]"),
    "bad JSON": (b"[[64, 128, 256],\n [1, 2", "not valid JSON"),
    "JSON float": (b"[[64, 128, 256],\n [64.7, 1, 2]]", "line 2: expected three integers"),
    "JSON true": (b"[[true, 1, 2]]", "expected three integers"),
    "JSON object": (b'{"shapes": [[1, 2, 3]]}', "got a JSON object"),
    "JSON not a list": (b"[[1, 2, 3]] x", "not valid JSON"),
    "deep JSON": (b"[" * 100000, "JSON"),
    "binary": (bytes(range(256)) * 4, "not a text file"),
    "NUL bytes": (b"64 128 256\n\x00\x00\n", "not a text file"),
    "empty": (b"", "no shapes"),
    "only comments": (b"# nothing\n\n", "no shapes"),
    "empty JSON list": (b"[]", "no shapes"),
}


@pytest.mark.parametrize("case", SHAPE_FILES)
def test_bad_shapes_files_name_the_line(case, work, capsys):
    content, needle = SHAPE_FILES[case]
    (work / "bad.txt").write_bytes(content)
    argv = run_argv()
    argv[2] = "bad.txt"
    refused(argv, capsys, "bad.txt", needle)
    nothing_written(work, "shapes.txt", "bad.txt")


BAD_RUN_ARGUMENTS = {
    "no budget": (["--budget-evals", "4"], [], "give a budget"),
    "zero evaluations": ([], ["--budget-evals", "0"], "--budget-evals"),
    "negative evaluations": ([], ["--budget-evals", "-5"], "at least 1"),
    "fractional evaluations": ([], ["--budget-evals", "64.7"], "expected an integer, got '64.7'"),
    "boolean evaluations": ([], ["--budget-evals", "true"], "expected an integer, got 'true'"),
    "negative minutes": ([], ["--budget-minutes", "-1"], "--budget-minutes"),
    "zero minutes": ([], ["--budget-minutes", "0"], "greater than 0"),
    "nan minutes": ([], ["--budget-minutes", "nan"], "finite"),
    "inf minutes": ([], ["--budget-minutes", "inf"], "finite"),
    "word minutes": ([], ["--budget-minutes", "soon"], "expected a number"),
    "zero per round": ([], ["--per-round", "0"], "--per-round"),
    "fractional per round": ([], ["--per-round", "2.5"], "expected an integer"),
    "explore above 1": ([], ["--explore", "2.0"], "--explore"),
    "explore below 0": ([], ["--explore", "-0.1"], "--explore"),
    "negative veto": ([], ["--veto-below", "-0.5"], "--veto-below"),
    "negative builds": ([], ["--max-builds", "-1"], "--max-builds"),
    "negative seed": ([], ["--seed", "-1"], "--seed"),
    "nan sim delay": ([], ["--sim-delay-ms", "nan"], "--sim-delay-ms"),
    "sample0": ([], ["--shapes", "sample0"], "1 to 1000"),
    "sample100000": ([], ["--shapes", "sample100000"], "1 to 1000"),
    "unknown shape set": ([], ["--shapes", "g2000"], "sampleN"),
    "sm75": ([], ["--arch", "sm75"], "sm80 to sm90"),
    "sm100": ([], ["--arch", "sm100"], "sm80 to sm90"),
    "not an arch": ([], ["--arch", "hopper"], "sm90"),
    "arch the simulator lacks": ([], ["--arch", "sm86"], "simulates sm80 and sm90"),
    "unknown policy": ([], ["--policy", "greedy"], "greedy"),
    "unknown llm": ([], ["--llm", "claude"], "claude"),
    "local without artifacts": ([], ["--backend", "local"], "--artifacts"),
    "missing warm start": ([], ["--warm-start", "nope.json"], "nope.json"),
    "store in a missing folder": ([], ["--store", "no/such/s.db"], "no/such"),
    "store that is a folder": ([], ["--store", "."], "is a folder"),
}


@pytest.mark.parametrize("case", BAD_RUN_ARGUMENTS)
def test_bad_run_arguments(case, work, capsys):
    drop, add, needle = BAD_RUN_ARGUMENTS[case]
    argv = run_argv()
    for flag in drop:
        if flag in argv:
            i = argv.index(flag)
            del argv[i:i + 2]
    refused(argv + add, capsys, needle)
    nothing_written(work, "shapes.txt")


@pytest.mark.parametrize("content, suffix, needle", [(bytes(range(256)), ".json", "not a sweep results file"),
                                                     (b'{"rows": 3}', ".json", "not a sweep results file"),
                                                     (b"\x1f\x8b garbage", ".gz", "not a sweep results file"),
                                                     (b"not sqlite at all", ".db", "not an SQLite database")])
def test_unreadable_warm_start_files(content, suffix, needle, work, capsys):
    (work / f"warm{suffix}").write_bytes(content)
    refused(run_argv("--warm-start", f"warm{suffix}"), capsys, f"warm{suffix}", needle)
    nothing_written(work, "shapes.txt", f"warm{suffix}")


def test_binary_memory_file(work, capsys):
    (work / "memory.md").write_bytes(bytes(range(256)))
    refused(run_argv("--memory", "memory.md"), capsys, "memory.md", "not a text file")
    nothing_written(work, "shapes.txt", "memory.md")


def test_llm_without_its_variables_fails_before_the_store_exists(work, capsys, monkeypatch):
    for var in ("CUDAL2_LLM_BASE_URL", "CUDAL2_LLM_MODEL", "CUDAL2_LLM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    refused(run_argv("--llm", "openai"), capsys, "CUDAL2_LLM_BASE_URL and CUDAL2_LLM_MODEL")
    monkeypatch.setenv("CUDAL2_LLM_BASE_URL", "ftp://example")
    monkeypatch.setenv("CUDAL2_LLM_MODEL", "m")
    refused(run_argv("--llm", "openai"), capsys, "not an http:// or https:// URL")
    nothing_written(work, "shapes.txt")


@pytest.mark.parametrize("argv, needle", [([], "required: command"), (["walk"], "invalid choice: 'walk'"),
                                          (["run", "--bogus"], "unrecognized arguments: --bogus"),
                                          (["report", "--store", "s.db"], "required: --out"),
                                          (["run", "--sim-workers", "2", "--budget-evals", "4", "--quiet"],
                                           "--backend ray")])
def test_malformed_command_lines(argv, needle, work, capsys):
    refused(argv, capsys, needle)
    nothing_written(work, "shapes.txt")


def test_emit_arguments(work, capsys):
    assert cli.main(run_argv()) == 0
    capsys.readouterr()
    wal_index = {"s.db-wal", "s.db-shm"}
    before = sorted(p.name for p in work.iterdir() if p.name not in wal_index)
    refused(["emit", "--store", "s.db", "--margin", "-5"], capsys, "--margin")
    refused(["emit", "--store", "s.db", "--margin", "nan"], capsys, "--margin")
    refused(["emit", "--store", "s.db", "--kernel-budget", "-1"], capsys, "--kernel-budget")
    refused(["emit", "--store", "s.db", "--kernel-budget", "0"], capsys, "--kernel-budget")
    refused(["emit", "--store", "s.db", "--run", "bogus"], capsys, "no run 'bogus'", "its runs:")
    (work / "afile").write_text("x")
    refused(["emit", "--store", "s.db", "--root", "afile"], capsys, "--root afile is a file")
    refused(["export", "--store", "s.db", "--out", "."], capsys, "is a folder")
    refused(["report", "--store", "s.db", "--out", "afile"], capsys, "--out afile is a file")
    assert sorted(p.name for p in work.iterdir() if p.name not in wal_index | {"afile"}) == before


def test_resume_bogus_run_and_a_store_without_runs(work, capsys):
    assert cli.main(run_argv()) == 0
    capsys.readouterr()
    refused(["resume", "--store", "s.db", "--run", "bogus"], capsys, "no run 'bogus' in s.db", "its runs:")
    refused(["resume", "--store", "s.db"], capsys, "every run in s.db has finished", "--run ID")
    refused(["resume", "--store", "s.db", "--budget-evals", "0"], capsys, "--budget-evals")
    Store(work / "empty.db").close()   # a store whose run was never recorded (killed at its start)
    for command in (["resume"], ["report", "--out", "r"], ["emit"], ["export", "--out", "x.jsonl"]):
        refused([command[0], "--store", "empty.db", *command[1:]], capsys, "empty.db holds no run")
    assert not (work / "r").exists() and not (work / "x.jsonl").exists()


def test_emit_on_a_store_without_a_correct_measurement(work, capsys):
    assert cli.main(run_argv("--compile-only")) == 0   # proposals compiled, nothing measured
    capsys.readouterr()
    refused(["emit", "--store", "s.db", "--root", "k"], capsys, "no correct measured candidate")
    assert not (work / "k").exists()


def corrupt_files(folder: Path) -> dict[str, Path]:
    """Store files that are missing, empty, truncated, overwritten, foreign or not SQLite at all."""
    good = folder / "good.db"
    assert cli.main(["run", "--shapes", "shapes.txt", "--budget-evals", "8", "--store", str(good), "--quiet"]) == 0
    data = good.read_bytes()
    files = {"missing": folder / "missing.db", "empty": folder / "empty.db", "truncated": folder / "truncated.db",
             "overwritten": folder / "overwritten.db", "foreign": folder / "foreign.db", "text": folder / "text.db"}
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(data[:len(data) // 2])
    files["overwritten"].write_bytes(data[:4096] + b"\xa5" * (len(data) - 4096))
    files["text"].write_text("runs,evaluations\n1,2\n")
    con = sqlite3.connect(files["foreign"])
    con.execute("CREATE TABLE notes (x)")
    con.close()
    good.unlink()
    return files


MESSAGES = {"missing": "does not exist", "empty": "is empty", "truncated": "truncated", "overwritten": "corrupt",
            "foreign": "not a search store", "text": "not an SQLite database"}


def test_read_only_commands_on_missing_and_corrupt_stores_create_nothing(work, capsys):
    files = corrupt_files(work)
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    for kind, path in files.items():
        for command in (["report", "--out", "r"], ["emit", "--root", "k"], ["export", "--out", "x.jsonl"],
                        ["resume"]):
            refused([command[0], "--store", str(path), *command[1:]], capsys, path.name, MESSAGES[kind])
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before


def test_run_refuses_to_append_to_a_damaged_store(work, capsys):
    files = corrupt_files(work)
    capsys.readouterr()
    for kind in ("truncated", "overwritten", "foreign", "text"):
        data = files[kind].read_bytes()
        argv = ["run", "--shapes", "shapes.txt", "--budget-evals", "4", "--quiet", "--store", str(files[kind])]
        refused(argv, capsys, files[kind].name, MESSAGES[kind])
        assert files[kind].read_bytes() == data
        assert not Path(f"{files[kind]}-wal").exists()   # refused before SQLite opened it for writing


def cli_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "search", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_as_a_process_one_line_and_exit_status_2_tracebacks_only_with_debug(tmp_path):
    missing = str(tmp_path / "missing.db")
    done = cli_process("run", "--budget-evals", "0", "--store", missing)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--budget-evals" in done.stderr
    done = cli_process("report", "--store", missing, "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    for debug in (["--debug"], []):
        done = cli_process("report", "--store", missing, "--out", str(tmp_path / "r"), *debug,
                           env={} if debug else {"CUDAL2_DEBUG": "1"})
        assert done.returncode != 0 and "Traceback" in done.stderr and "StoreError" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []



@pytest.mark.parametrize("flag,value", [("--llm-prior", "-1"), ("--llm-prior", "nan"), ("--llm-group", "0"),
                                        ("--llm-group", "2.5")])
def test_llm_prior_and_group_are_validated(tmp_path, flag, value, capsys):
    refused(["run", "--store", str(tmp_path / "s.db"), flag, value], capsys, flag)
    assert not (tmp_path / "s.db").exists()
