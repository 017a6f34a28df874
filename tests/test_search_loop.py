"""The search loop end to end on the simulated backend: run, resume (verdicts stored as they arrive, a stopped round
finished), compile cache, compile-only, report, emit, export."""
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from cudal2_ops import tables
from search import __main__ as cli
from search.candidate import MALFORMED, OK, SCAN_REJECTED, Candidate, Problem, Proposal
from search.export import lines as export_lines
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.source_build import MAX_SOURCE_CHARS
from search.store import TEXT_CAP, Store

PROBLEMS = [Problem("nt", "fp16", m, n, k) for m, n, k in ((64, 4096, 4096), (128, 4096, 4096), (1024, 128, 64),
                                                            (4096, 4096, 4096), (12288, 8192, 128))]


class CountingBackend(SimulatedBackend):
    """The simulated backend, counting every build it is asked to compile."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.builds: list[str] = []

    def compile(self, candidates):
        self.builds += [c.build_key for c in candidates]
        return super().compile(candidates)


def test_a_run_spends_its_budget_and_never_compiles_a_build_twice():
    store, backend = Store(":memory:"), CountingBackend()
    search = Search.start(store, backend, RunArgs(policy="rl", budget_evals=60), PROBLEMS)
    search.run()
    assert store.evaluation_count(search.run_id) == 60
    assert len(backend.builds) == len(set(backend.builds)) == store.new_builds(search.run_id)
    assert not set(backend.builds) & backend.prebuilt()  # the extension's kernels are never compiled
    statuses = {r["status"] for r in store.evaluations(search.run_id)}
    assert OK in statuses
    assert len(store.query("SELECT * FROM policy_snapshots")) >= 2
    again = Search.start(store, backend, RunArgs(policy="random", budget_evals=40, seed=1), PROBLEMS)
    builds_before = len(backend.builds)
    again.run()
    reused = {r["candidate_id"].split("@")[0] for r in store.evaluations(again.run_id)}
    assert len(backend.builds) - builds_before == len(set(backend.builds[builds_before:]))
    assert not set(backend.builds[builds_before:]) & set(backend.builds[:builds_before])
    assert reused  # the second run ran, reusing the first run's builds where it met them


def test_build_budget_limits_new_builds_and_the_run_goes_on_with_built_kernels():
    store, backend = Store(":memory:"), CountingBackend()
    for policy in ("rl", "random"):
        search = Search.start(store, backend, RunArgs(policy=policy, budget_evals=60, max_builds=3), PROBLEMS)
        search.run()
        assert store.new_builds(search.run_id) <= 3 and store.evaluation_count(search.run_id) == 60
        used = {r["candidate_id"].split("@")[0] for r in store.evaluations(search.run_id)}
        assert used <= store.built_keys() | {k for k in backend.builds}
    assert len(backend.builds) <= 6


def test_compile_only_then_resume_evaluates_the_compiled_proposals():
    store, backend = Store(":memory:"), CountingBackend()
    first = Search.start(store, backend, RunArgs(policy="random", compile_only=True, budget_evals=30), PROBLEMS)
    first.run()
    assert store.evaluation_count(first.run_id) == 0 and backend.builds
    proposed = {(r["candidate_id"], r["problem_key"]) for r in store.proposals(first.run_id) if not r["status"]}
    resumed = Search.resume(store, CountingBackend(), first.run_id)
    resumed.run()
    evaluated = {(r["candidate_id"], r["problem_key"]) for r in store.evaluations(first.run_id)}
    assert proposed <= evaluated and store.evaluation_count(first.run_id) == 30
    assert resumed.backend.builds == [] or not set(resumed.backend.builds) & set(backend.builds)


class Interrupted(SimulatedBackend):
    """The simulated backend, interrupted (as by a kill) when its `stop_at`-th verdict arrives."""

    def __init__(self, stop_at: int):
        super().__init__()
        self.stop_at, self.delivered = stop_at, 0

    def evaluate_iter(self, requests):
        for index, result in super().evaluate_iter(requests):
            self.delivered += 1
            if self.delivered == self.stop_at:
                raise KeyboardInterrupt
            yield index, result


class WholeChunks(SimulatedBackend):
    """The simulated backend without `evaluate_iter`: verdicts come back a chunk at a time."""

    evaluate_iter = None

    def evaluate(self, requests):
        return [result for _, result in SimulatedBackend.evaluate_iter(self, requests)]


def test_verdicts_are_stored_as_they_arrive_and_resume_gives_every_problem_its_share():
    args = RunArgs(per_round=3, budget_evals=45)
    reference = Store(":memory:")
    Search.start(reference, WholeChunks(), args, PROBLEMS).run()
    shares = dict(reference.query("SELECT problem_key, COUNT(*) FROM evaluations GROUP BY 1"))
    assert set(shares.values()) == {9}
    store = Store(":memory:")
    search = Search.start(store, Interrupted(stop_at=20), args, PROBLEMS)
    with pytest.raises(KeyboardInterrupt):
        search.run()
    delivered = store.query("SELECT COUNT(*) FROM evaluations WHERE status != 'compile_error'")[0][0]
    assert delivered == 19      # each verdict stored before the next arrived (failed builds need no backend)
    Search.resume(store, SimulatedBackend(), search.run_id).run()
    assert dict(store.query("SELECT problem_key, COUNT(*) FROM evaluations GROUP BY 1")) == shares


def test_resume_restores_the_policy_and_extends_the_budget(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    search = Search.start(store, SimulatedBackend(), RunArgs(budget_evals=40), PROBLEMS)
    search.run()
    elites = search.policy.elites
    resumed = Search.resume(store, SimulatedBackend(), search.run_id, {"budget_evals": 80})
    assert resumed.policy.elites == elites and resumed.policy.updates == search.policy.updates
    resumed.run()
    assert store.evaluation_count(search.run_id) == 80


class EventLog(SimulatedBackend):
    """The simulated backend, logging ("eval", problem key) per verdict into `events`."""

    def __init__(self, events: list):
        super().__init__()
        self.events = events

    def evaluate_iter(self, requests):
        for index, result in super().evaluate_iter(requests):
            self.events.append(("eval", requests[index][1].key))
            yield index, result


def logged_search(store: Store, args: RunArgs, events: list, run_id: str | None = None) -> Search:
    """A search whose proposals are logged as ("propose", problem key) into `events`, beside its verdicts."""
    backend = EventLog(events)
    search = Search.resume(store, backend, run_id, dataclasses.asdict(args)) if run_id else \
        Search.start(store, backend, args, PROBLEMS)
    propose = search.propose

    def logged(round_, problems=None):
        events.extend(("propose", p.key) for p in (search.problems if problems is None else problems))
        return propose(round_, problems)

    search.propose = logged
    return search


def test_a_round_goes_wave_by_wave_each_evaluated_before_the_next_is_proposed():
    events: list = []
    store = Store(":memory:")
    search = logged_search(store, RunArgs(per_round=2, wave=2, budget_evals=10), events)
    search.run()
    keys = [p.key for p in search.problems]  # the run's order (smallest first)
    steps = [(kind, key) for index, (kind, key) in enumerate(events) if index == 0 or events[index - 1] != (kind, key)]
    assert steps == [("propose", keys[0]), ("propose", keys[1]), ("eval", keys[0]), ("eval", keys[1]),
                     ("propose", keys[2]), ("propose", keys[3]), ("eval", keys[2]), ("eval", keys[3]),
                     ("propose", keys[4]), ("eval", keys[4])]
    assert store.snapshot_rounds(search.run_id) == {0}


def test_a_round_the_budget_cut_between_waves_stays_open_and_resume_proposes_the_rest():
    events: list = []
    store = Store(":memory:")
    first = logged_search(store, RunArgs(per_round=2, wave=2, budget_evals=4), events)
    first.run()
    assert store.proposed_problems(first.run_id, 0) == {p.key for p in first.problems[:2]}
    assert store.snapshot_rounds(first.run_id) == set()    # round 0 not closed: three problems never proposed
    events.clear()
    logged_search(store, RunArgs(per_round=2, wave=2, budget_evals=10), events, first.run_id).run()
    assert [key for kind, key in events if kind == "propose"] == [p.key for p in first.problems[2:]]
    assert dict(store.query("SELECT problem_key, COUNT(*) FROM evaluations GROUP BY 1")) == {
        p.key: 2 for p in PROBLEMS}
    assert store.snapshot_rounds(first.run_id) == {0}


class OneSource:
    """A proposer that answers each problem with one kernel source of `size` characters (once)."""

    def __init__(self, size: int):
        self.size = size

    def propose(self, problem, context, n):
        cand = Candidate(source=f"// {problem.key}\n" + "x" * self.size, source_name="big", provenance="llm:test")
        return [] if cand.id in context.seen else [Proposal(cand, prompt="p", completion=cand.source)]


def test_a_source_too_long_to_store_whole_is_refused_when_proposed():
    """Its stored text is cut (the store's cap), so it could never be rebuilt on resume: the loop refuses it before
    compiling, and a resume finds nothing of it to evaluate."""
    store, backend = Store(":memory:"), CountingBackend()
    search = Search.start(store, backend, RunArgs(policy="random", per_round=2, budget_evals=4), PROBLEMS[:2])
    search.proposers.append((OneSource(MAX_SOURCE_CHARS + 1), "llm:test", 0.5))
    search.run()
    refused = [r for r in store.proposals(search.run_id) if r["provenance"] == "llm:test"]
    assert len(refused) == 2 and all(r["status"] == SCAN_REJECTED and "limit" in r["reason"] for r in refused)
    assert all(len(r["completion"]) < TEXT_CAP + 100 for r in refused)
    assert not any(key.startswith("src_") for key in backend.builds) and store.unevaluated(search.run_id) == []
    Search.resume(store, SimulatedBackend(), search.run_id, {"budget_evals": 6}).run()
    assert all(not r["candidate_id"].startswith("src_") for r in store.evaluations(search.run_id))


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory) -> str:
    """A store written through the CLI: an rl and a random run, the first resumed with a larger budget, and an LLM
    proposal added."""
    folder = tmp_path_factory.mktemp("cli")
    db = str(folder / "s.db")
    shapes = folder / "shapes.txt"
    shapes.write_text("".join(f"{p.m} {p.n} {p.k}\n" for p in PROBLEMS))
    for policy in ("rl", "random"):
        assert cli.main(["run", "--shapes", str(shapes), "--budget-evals", "50", "--store", db, "--policy", policy,
                         "--quiet"]) == 0
    reader = Store(db, readonly=True)
    first_run = reader.runs()[0]["id"]
    reader.close()
    assert cli.main(["resume", "--store", db, "--run", first_run, "--budget-evals", "60", "--quiet"]) == 0
    store = Store(db)
    assert store.evaluation_count(first_run) == 60
    store.add_proposal(first_run, 9, PROBLEMS[0], Proposal(None, MALFORMED, "no JSON object", "the prompt", "oops"),
                       "llm:test")
    store.close()
    return db


def test_cli_report(cli_store, tmp_path):
    pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (the bench extra)")
    assert cli.main(["report", "--store", cli_store, "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    for section in ("Policies at equal budget", "What the policy learned", "Failures by status", "| random |"):
        assert section in report
    assert (tmp_path / "report" / "reward_by_policy.png").stat().st_size > 1000
    zipped = tmp_path / "s.sqlite.gz"   # results folders keep stores gzipped: the report reads them as they are
    zipped.write_bytes(gzip.compress(Path(cli_store).read_bytes()))
    assert cli.main(["report", "--store", str(zipped), "--out", str(tmp_path / "zipped")]) == 0
    assert (tmp_path / "zipped" / "report.md").read_text() == report.replace(f"`{cli_store}`", f"`{zipped}`")


def test_cli_emit_export(cli_store, tmp_path, monkeypatch):
    db = cli_store
    root = tmp_path / "kernels"
    assert cli.main(["emit", "--store", db, "--root", str(root), "--kernel-budget", "2"]) == 0
    table_file = root / "sm90" / "simulated_h100_sxm.json"
    table = json.loads(table_file.read_text())
    kernels = {e["kernel"] for e in table["entries"].values()}
    assert 0 < len(kernels) <= 2 and all(e["speedup"] > 1.03 for e in table["entries"].values())
    for name in kernels:
        assert list(root.glob(f"*/{name}.cu"))
    monkeypatch.setenv("CUDAL2_TABLE", str(table_file))
    facts = tables.DeviceFacts("Simulated H100 SXM", 132, (9, 0), "simulated")
    assert tables.load_table_for(facts) is not None
    out = tmp_path / "rl.jsonl"
    assert cli.main(["export", "--store", db, "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    store = Store(db, readonly=True)
    assert lines == export_lines(store)
    (completion,) = lines[-1]["completions"]   # (format: tests/test_search_export.py)
    assert (completion["text"], completion["reward"], completion["items"][0]["status"]) == ("oops", -1.0, MALFORMED)


def test_emit_keeps_existing_entries_the_run_gives_no_reason_to_drop(tmp_path):
    store = Store(tmp_path / "s.db")
    Search.start(store, SimulatedBackend(), RunArgs(budget_evals=60), PROBLEMS).run()
    root = tmp_path / "kernels"
    table_file = root / "sm90" / "simulated_h100_sxm.json"
    table_file.parent.mkdir(parents=True)
    old_entry = {"kernel": "older_kernel", "splits": 0, "swizzle": 0, "raster": 0, "kernel_us": 1.0,
                 "baseline_us": 2.0, "baseline": "cublaslt-autotune", "speedup": 2.0, "provenance": "sweep"}
    env = SimulatedBackend().environment()
    measured_key, untried_key = PROBLEMS[0].key, PROBLEMS[1].key
    timed = next(r for r in store.evaluations() if r["problem_key"] == measured_key and r["status"] == OK)
    cand = store.candidate(timed["candidate_id"])
    timed_entry = {**old_entry, "kernel": cand.kernel_name, "splits": cand.knobs[0], "swizzle": cand.knobs[1],
                   "raster": cand.knobs[2]}
    table_file.write_text(json.dumps({"header": {"gpu_name": env["gpu_name"], "sm_count": env["sm_count"],
                                                 "search_run": "old-sweep", "rules": {"nearest_m_up": False}},
                                      "entries": {"nt_bf16_1_4096_4096": old_entry, measured_key: timed_entry,
                                                  untried_key: old_entry}}))
    cli.main(["emit", "--store", str(tmp_path / "s.db"), "--root", str(root)])
    table = json.loads(table_file.read_text())
    assert table["entries"]["nt_bf16_1_4096_4096"] == old_entry          # a problem the run did not measure
    assert table["entries"].get(measured_key) != timed_entry             # the run timed this entry: its verdict wins
    new = table["entries"][untried_key]                                  # measured, but the old kernel never tried:
    assert new == old_entry or new["provenance"] != "sweep"              # kept unless the run found a winner
    assert table["header"]["kept_from"]["search_run"] == "old-sweep"


def test_emit_without_measurements_says_so(tmp_path, capsys):
    store = Store(tmp_path / "s.db")
    Search.start(store, SimulatedBackend(), RunArgs(compile_only=True), PROBLEMS).run()
    store.close()
    assert cli.main(["emit", "--store", str(tmp_path / "s.db"), "--root", str(tmp_path / "k")]) == 2
    assert "no correct measured candidate" in capsys.readouterr().err and not (tmp_path / "k").exists()


@pytest.mark.parametrize("veto_below", [0.0, 0.8])
def test_the_runs_veto_reaches_its_policy_proposer_and_survives_resume(tmp_path, veto_below):
    """--veto-below is a run setting: the rl proposer gets it, a resumed run keeps it (0 turns the veto off)."""
    store = Store(tmp_path / "s.sqlite")
    search = Search.start(store, SimulatedBackend(), RunArgs(policy="rl", budget_evals=8, veto_below=veto_below),
                          PROBLEMS)
    search.run()
    assert search.proposers[0][0].veto_below == veto_below
    resumed = Search.resume(store, SimulatedBackend(), search.run_id, {"budget_evals": 16})
    assert resumed.proposers[0][0].veto_below == veto_below
