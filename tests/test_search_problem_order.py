"""search/problem_order.py: a run visits first the problems another run's stores won on (best first), then the rest
smallest first; the order survives a resume and reaches the CLI (simulated backend)."""
import gzip
from pathlib import Path

import pytest

from search import __main__ as cli
from search.candidate import Problem
from search.errors import UserError
from search.loop import RunArgs, Search
from search.problem_order import best_speedups, order_problems
from search.simulate import SimulatedBackend
from search.store import Store

PROBLEMS = [Problem("nt", "fp16", m, n, k) for m, n, k in (
    (64, 64, 64), (64, 128, 64), (128, 128, 64), (64, 64, 512), (256, 256, 256), (1, 4096, 4096), (16, 4096, 4096),
    (512, 512, 512), (1024, 1024, 1024), (4096, 4096, 4096))]


@pytest.fixture(scope="module")
def other_gpu(tmp_path_factory) -> Path:
    """A gzipped store of a simulated run over PROBLEMS, as another GPU's committed searched-table store."""
    plain = tmp_path_factory.mktemp("other") / "search_table_fp16_nt.sqlite"
    store = Store(plain)
    Search.start(store, SimulatedBackend(), RunArgs(budget_evals=80, per_round=8), PROBLEMS).run()
    store.close()
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    return packed


def test_wins_go_first_best_first_and_the_rest_keep_their_order(other_gpu):
    best = best_speedups([str(other_gpu)])
    wins = [p for p in PROBLEMS if best.get(p.key, 0) > 1]
    assert 0 < len(wins) < len(PROBLEMS), best  # the fixture must hold both kinds for the test to mean anything
    ordered = order_problems(PROBLEMS, [str(other_gpu)])
    assert sorted(p.key for p in ordered) == sorted(p.key for p in PROBLEMS)
    head, tail = ordered[:len(wins)], ordered[len(wins):]
    assert {p.key for p in head} == {p.key for p in wins}
    assert [best[p.key] for p in head] == sorted((best[p.key] for p in head), reverse=True)
    assert tail == [p for p in PROBLEMS if p not in wins]
    assert order_problems(PROBLEMS, []) == PROBLEMS


def test_a_file_that_is_not_a_store_is_refused_by_name(tmp_path):
    sweep = tmp_path / "sweep.json.gz"
    sweep.write_bytes(gzip.compress(b"{}"))
    with pytest.raises(UserError, match="sweep.json.gz: not a search store"):
        order_problems(PROBLEMS, [str(sweep)])


def test_a_run_visits_the_wins_first_and_a_resume_can_set_them(other_gpu, tmp_path):
    """The first wave of a run with wins_first_from holds the other store's wins; a run started without it and
    resumed with it (the committed H100 stores' case) takes the order for what it has not proposed yet."""
    wins = [p.key for p in order_problems(PROBLEMS, [str(other_gpu)])][:2]
    store = Store(tmp_path / "s.db")
    search = Search.start(store, SimulatedBackend(), RunArgs(budget_evals=8, per_round=4, wave=2,
                                                             wins_first_from=[str(other_gpu)]), PROBLEMS)
    search.run()
    assert sorted({e["problem_key"] for e in store.evaluations(search.run_id)}) == sorted(wins)
    plain = Search.start(store, SimulatedBackend(), RunArgs(budget_evals=8, per_round=4, wave=2), PROBLEMS)
    plain.run()
    assert {e["problem_key"] for e in store.evaluations(plain.run_id)} == {p.key for p in PROBLEMS[:2]}
    resumed = Search.resume(store, SimulatedBackend(), plain.run_id,
                            {"budget_evals": 16, "wins_first_from": [str(other_gpu)]})
    resumed.run()
    later = {e["problem_key"] for e in store.evaluations(plain.run_id)} - {p.key for p in PROBLEMS[:2]}
    expected = [k for k in (p.key for p in order_problems(PROBLEMS, [str(other_gpu)]))
                if k not in {p.key for p in PROBLEMS[:2]}][:2]
    assert later == set(expected)


def test_the_cli_takes_the_stores_for_a_run_and_a_resume(other_gpu, tmp_path, capsys):
    db = tmp_path / "cli.db"
    assert cli.main(["run", "--store", str(db), "--shapes", "sample20", "--budget-evals", "8", "--quiet",
                     "--wins-first-from", str(other_gpu)]) == 0
    reader = Store(db, readonly=True)
    run = reader.runs()[-1]
    reader.close()
    assert run["args"].count(str(other_gpu)) == 1
    assert cli.main(["resume", "--store", str(db), "--run", run["id"], "--budget-evals", "12", "--quiet",
                     "--wins-first-from", str(other_gpu)]) == 0
    assert cli.main(["resume", "--store", str(db), "--run", run["id"], "--wins-first-from",
                     str(tmp_path / "none.gz")]) == 2
    assert "--wins-first-from" in capsys.readouterr().err
