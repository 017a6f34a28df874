"""The search loop: propose, check, compile (cached by build key), evaluate, reward, store, learn; round after round.

Each round, every problem of the run gets `per_round` proposals split between the proposers (the policy's share,
an exploration share of random points, the LLM's share when enabled); infeasible ones and sources over
`source_build.MAX_SOURCE_CHARS` (SCAN_REJECTED: the store keeps them truncated, so they could not be rebuilt) are
recorded and dropped; new builds are compiled (a build key the store has is never compiled again, the backend's
prebuilt kernels never; at most `max_builds` new ones per run, proposals past it are recorded infeasible); a failed
build's requests get its status (COMPILE_ERROR, or SCAN_REJECTED when the compile farm refused the source) with its
log; the rest are handed to the backend in chunks of `chunk` requests, and each verdict is stored (with its reward
and the run time it took) and learned from as it arrives (a backend with `evaluate_iter` delivers them one by one;
one with only `evaluate`, when the chunk returns). The budget is a number of evaluations and/or minutes of the run's
own time (summed over resumes).

With `wave`, a round goes `wave` problems at a time: a wave's proposals are evaluated (and learned from) before the
next wave is proposed, so a round over hundreds of problems (a table's search, whose budget may end within its first
round) proposes for its later problems with what its earlier ones taught; without it a round proposes for every
problem before evaluating any.

A stopped run (killed, or `--compile-only`) is finished on `resume` where it stopped: every proposal without a
verdict is evaluated, then a round without its policy snapshot gets the proposals of the problems it had not reached
(each problem's proposals of a round are stored together; wave by wave) and their verdicts, then the round is closed
and the next begins. A round the budget cut before its last problem was proposed stays open for the next resume.
"""
from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import math
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from search import problem_order, warm_start
from search.backend import Backend, CompileOutcome
from search.candidate import INFEASIBLE, OK, SCAN_REJECTED, Candidate, EvalResult, Problem, Proposal
from search.errors import UserError
from search.fault_injection import checkpoint
from search.policy import Policy
from search.proposers import (VETO_BELOW, Measured, PolicyProposer, Proposer, ProposalContext, RandomProposer,
                              SweepHeuristicProposer)
from search.reward import reward
from search.candidate_space import check
from search.source_build import oversized
from search.store import Store

POLICIES = ("rl", "random", "sweep")
CONTRAST = 4           # best and worst measured candidates shown per problem
NEIGHBOUR_DISTANCE = 4.0  # problems within this L1 distance in log2 (M, N, K) are neighbours
EVIDENCE_DISTANCE = 2.0   # ... and within this one, their kernels' speedups are evidence for the problem's own


@dataclasses.dataclass
class RunArgs:
    """A run's settings (stored with the run; `resume` restores them)."""

    policy: str = "rl"
    llm: str = "none"
    per_round: int = 4
    explore: float = 0.0          # share of each problem's proposals drawn at random (policy rl)
    veto_below: float = VETO_BELOW  # rl: PolicyProposer.veto_below (0: no veto)
    llm_share: float = 0.25       # share of each problem's proposals asked of the LLM (--llm other than none)
    llm_prior: float = 1.0        # the LLM as the policy's prior: its imitation step per LLM config (Policy.update)
    llm_group: int = 1            # completions sampled per LLM prompt (groups for group-relative RL export)
    budget_evals: int | None = None
    budget_minutes: float | None = None
    seed: int = 0
    chunk: int = 64
    wave: int | None = None       # problems proposed and evaluated together within a round (None: the whole round),
                                  # so a round over many problems learns from its first problems' verdicts
    compile_only: bool = False
    memory: str = ""              # contextual-memory file (LLM prompts); the memory hook updates it every round
    arch: int = 90
    backend: str = "sim"
    artifacts: str = ""
    sim_delay_ms: float = 0.0
    max_builds: int | None = None  # new build keys the run may compile in total (None: unlimited)
    warm_start: list[str] = dataclasses.field(default_factory=list)  # measurements the rl policy is first fit to
    wins_first_from: list[str] = dataclasses.field(default_factory=list)  # stores whose wins go first (problem_order)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise UserError(f"unknown policy {self.policy!r}; supported: {POLICIES}")
        if self.wave is not None and self.wave < 1:
            raise UserError(f"--wave must be at least 1 problem (got {self.wave})")
        if self.budget_evals is None and self.budget_minutes is None and not self.compile_only:
            raise UserError("give a budget: --budget-evals and/or --budget-minutes")


def geomean(values: list[float]) -> float:
    """Geometric mean (nan for an empty list)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _distance(a: Problem, b: Problem) -> float:
    return sum(abs(math.log2(x) - math.log2(y)) for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k)))


def llm_proposer(name: str, group: int = 1) -> Proposer:
    """The LLM proposer (search.llm) for `--llm NAME`, sampling `group` completions per prompt."""
    from search.llm import LLMProposer  # only `--llm` other than none needs it
    return LLMProposer.from_env(name, group)


def memory_hook(store: Store, path: str) -> None:
    """Updates the contextual-memory file through `search.llm.memory.update(store, path)` when it is installed."""
    try:
        memory = importlib.import_module("search.llm.memory")
    except ModuleNotFoundError:
        return
    memory.update(store, Path(path))


def initial_policy(args: RunArgs) -> Policy:
    """A run's policy before its first verdict: the prior, fit to the `warm_start` measurements (rl runs)."""
    policy = Policy(args.arch, args.seed, llm_prior=args.llm_prior if args.llm != "none" else 0.0)
    if args.policy == "rl" and args.warm_start:
        warm_start.warm_start(policy, warm_start.load([Path(p) for p in args.warm_start]), args.seed)
    return policy


class Search:
    """One run of the loop over a store and a backend (create with `start` or `resume`)."""

    def __init__(self, store: Store, backend: Backend, run_id: str, args: RunArgs, policy: Policy | None = None,
                 on_eval: Callable[[int, float], None] | None = None):
        self.store, self.backend, self.run_id, self.args, self.arch = store, backend, run_id, args, args.arch
        self.problems = problem_order.order_problems(store.run_problems(run_id), args.wins_first_from)
        self.policy = policy or initial_policy(args)
        self.on_eval = on_eval
        self.measured: dict[str, list[Measured]] = {}
        self.tried = store.tried(run_id)
        for row in store.evaluations(run_id):
            if row["status"] == OK:
                self._remember(row["problem_key"], store.candidate(row["candidate_id"]), row["us"],
                               row["baseline_us"] / row["us"])
        self.proposers = self._proposers()
        prebuilt = getattr(backend, "prebuilt", None)
        self.prebuilt = set(prebuilt()) if prebuilt else set()
        self.planned: set[str] = set()  # new build keys proposed this round, not compiled yet
        self.baselines = {(d["fingerprint"], d["problem"]) for d in store.baselines()}  # the judge's, stored
        if hasattr(backend, "use_baselines"):
            backend.use_baselines(store.baselines())
        if hasattr(backend, "rebuild_missing"):  # the store's earlier builds, on a machine that lacks them
            backend.rebuild_missing(store.compiled_candidates())
        self.mark = time.monotonic()    # when the run's time was last added to the store

    @classmethod
    def start(cls, store: Store, backend: Backend, args: RunArgs, problems: list[Problem], **kwargs) -> "Search":
        """A new run of `problems`."""
        env = backend.environment()
        if env.get("arch", args.arch) != args.arch:
            raise UserError(f"the backend's GPU is sm{env['arch']}, the run asks for --arch sm{args.arch}")
        run_id = store.create_run(args.policy, dataclasses.asdict(args), env, problems)
        return cls(store, backend, run_id, args, **kwargs)

    @classmethod
    def resume(cls, store: Store, backend: Backend, run_id: str, overrides: dict | None = None,
               **kwargs) -> "Search":
        """The run `run_id` continued (its stored args, with `overrides`): its latest policy snapshot, with the
        verdicts recorded after it replayed."""
        args = RunArgs(**{**json.loads(store.run(run_id)["args"]), "compile_only": False, **(overrides or {})})
        snapshot = store.latest_policy(run_id)
        policy = Policy.from_json(snapshot) if snapshot else initial_policy(args)
        after = max((r["round"] for r in store.query(
            "SELECT round FROM policy_snapshots WHERE run_id = ?", (run_id,))), default=-1)
        problems = {p.key: p for p in store.run_problems(run_id)}
        for r in store.evaluations(run_id):
            if r["round"] > after:
                cand = dataclasses.replace(store.candidate(r["candidate_id"]), provenance=r["provenance"])
                policy.update(problems[r["problem_key"]], cand, r["reward"])
        return cls(store, backend, run_id, args, policy=policy, **kwargs)

    def _proposers(self) -> list[tuple[Proposer, str, float]]:
        """(proposer, provenance label, share of each problem's proposals)."""
        a = self.args
        main = {"rl": PolicyProposer(self.policy, veto_below=a.veto_below), "random": RandomProposer(a.seed),
                "sweep": SweepHeuristicProposer(a.seed)}[a.policy]
        shares = [(main, a.policy, 1.0)]
        if a.policy == "rl" and a.explore:
            shares = [(main, "policy", 1.0 - a.explore), (RandomProposer(a.seed + 1), "random", a.explore)]
        if a.llm != "none":
            shares = [(p, label, share * (1.0 - a.llm_share)) for p, label, share in shares]
            shares.append((llm_proposer(a.llm, a.llm_group), f"llm:{a.llm}", a.llm_share))
        return shares

    def _remember(self, key: str, cand: Candidate, us: float, speedup: float) -> None:
        self.measured.setdefault(key, []).append(Measured(cand, key, us, speedup))

    def context(self, problem: Problem) -> ProposalContext:
        """The proposers' view of `problem`: contrastive examples here and in neighbouring problems, the memory."""
        here = sorted(self.measured.get(problem.key, []), key=lambda m: m.us)
        distance = {p.key: _distance(p, problem) for p in self.problems
                    if (p.dtype, p.layout) == (problem.dtype, problem.layout)}
        near = [best for key, d in distance.items() if key != problem.key and d <= NEIGHBOUR_DISTANCE
                for best in sorted(self.measured.get(key, []), key=lambda m: m.us)[:1]]
        memory = Path(self.args.memory).read_text() if self.args.memory and Path(self.args.memory).exists() else ""
        return ProposalContext(self.arch, best=here[:CONTRAST], worst=here[-CONTRAST:][::-1] if here else [],
                               neighbour_best=sorted(near, key=lambda m: -m.speedup)[:CONTRAST],
                               near_kernels=self._near_kernels(distance), memory=memory,
                               seen=set(self.tried.get(problem.key, set())),
                               built=self.store.built_keys() | self.prebuilt | self.planned,
                               can_build=self.builds_left() > 0,
                               pool=(self.backend.measured_pool(problem) if hasattr(self.backend, "measured_pool")
                                     else None))

    def _near_kernels(self, distance: dict[str, float]) -> dict[str, float]:
        """Kernel -> the best speedup this run measured for it (any knobs) on the problems within EVIDENCE_DISTANCE
        (`distance`: problem key -> its distance to the problem, the problem itself included at 0)."""
        out: dict[str, float] = {}
        for key, d in distance.items():
            if d <= EVIDENCE_DISTANCE:
                for m in self.measured.get(key, []):
                    if m.candidate.config:
                        out[m.candidate.config] = max(out.get(m.candidate.config, 0.0), m.speedup)
        return out

    def builds_left(self) -> float:
        """New builds the run may still compile (infinite without max_builds)."""
        if self.args.max_builds is None:
            return math.inf
        return self.args.max_builds - self.store.new_builds(self.run_id) - len(self.planned)

    def needs_build(self, cand: Candidate) -> bool:
        """Whether proposing `cand` takes one of the run's new builds."""
        key = cand.build_key
        return key not in self.prebuilt and key not in self.planned and self.store.compile_outcome(key) is None

    def best_speedups(self) -> dict[str, float]:
        """Problem key -> best measured speedup so far."""
        return {key: max(m.speedup for m in ms) for key, ms in self.measured.items() if ms}

    def done(self) -> bool:
        """Whether the budget is spent."""
        a = self.args
        row = self.store.run(self.run_id)
        return ((a.budget_evals is not None and self.store.evaluation_count(self.run_id) >= a.budget_evals) or
                (a.budget_minutes is not None and row["elapsed_s"] >= 60 * a.budget_minutes))

    def propose(self, round_: int, problems: Iterable[Problem] | None = None) -> list[tuple[Candidate, Problem]]:
        """One round of proposals for every problem of the run (or `problems`), each problem's recorded together
        with the time they took; the feasible new ones."""
        requests = []
        mark = time.monotonic()
        for problem in self.problems if problems is None else problems:
            context = self.context(problem)
            recorded: list[tuple[Proposal, str]] = []
            for proposer, label, share in self.proposers:
                count = max(1, round(self.args.per_round * share))
                for proposal in proposer.propose(problem, context, count):
                    cand = proposal.candidate
                    if cand is not None:
                        if cand.id in context.seen:
                            continue
                        context.seen.add(cand.id)
                        proposal = self.vet(proposal, problem)
                    recorded.append((proposal, label))
                    if cand is not None:
                        self.tried.setdefault(problem.key, set()).add(cand.id)
                        if not proposal.status:
                            requests.append((cand, problem))
            now = time.monotonic()
            self.store.add_proposals(self.run_id, round_, problem, recorded, elapsed_s=now - mark)
            mark = now
            checkpoint("proposed")
        return requests

    def vet(self, proposal: Proposal, problem: Problem) -> Proposal:
        """`proposal` (with a candidate) as the run takes it: INFEASIBLE when the candidate does not fit the problem
        or the build budget is spent, SCAN_REJECTED when its source is too long; a new build it needs is planned."""
        cand = proposal.candidate
        ok, why = check(cand, problem, self.arch)
        if not proposal.status and not ok:
            proposal = dataclasses.replace(proposal, status=INFEASIBLE, reason=why)
        too_long = oversized(cand.source)
        if not proposal.status and too_long:
            proposal = dataclasses.replace(proposal, status=SCAN_REJECTED, reason=too_long)
        if not proposal.status and self.needs_build(cand):
            if self.builds_left() <= 0:
                proposal = dataclasses.replace(proposal, status=INFEASIBLE, reason=(
                    f"build budget spent ({self.args.max_builds} new builds)"))
            else:
                self.planned.add(cand.build_key)
        return proposal

    def pending(self) -> list[tuple[int, Candidate, Problem]]:
        """(round, candidate, problem) of the run's usable proposals without a verdict (a stopped run's in-flight or
        compile-only work), in proposal order."""
        problems = {p.key: p for p in self.problems}
        return [(r["round"], self.store.candidate(r["candidate_id"]), problems[r["problem_key"]])
                for r in self.store.unevaluated(self.run_id)]

    def compile(self, requests: list[tuple[Candidate, Problem]]) -> dict[str, bool]:
        """Compiles the builds the store has not seen; build key -> ok for every request's build."""
        builds = {cand.build_key: cand for cand, _ in requests}
        known = {key: self.store.compile_outcome(key) for key in builds}
        for key in builds:
            if known[key] is None and key in self.prebuilt:
                known[key] = CompileOutcome(True, artifact="prebuilt", log="built into the extension's library")
                self.store.add_compile(key, known[key], self.run_id, prebuilt=True)
        new = [cand for key, cand in builds.items() if known[key] is None]
        if new:
            for key, outcome in self.backend.compile(new).items():
                self.store.add_compile(key, outcome, self.run_id)
                known[key] = outcome
        self.planned.clear()
        return {key: outcome.ok for key, outcome in known.items()}

    def verdicts(self, requests: list[tuple[Candidate, Problem]]) -> Iterable[tuple[int, EvalResult]]:
        """(request index, verdict) as the backend delivers them: one by one from a backend with `evaluate_iter`,
        all at once when `evaluate` returns from one without."""
        if not requests:
            return ()
        stream = getattr(self.backend, "evaluate_iter", None)
        return stream(requests) if stream else enumerate(self.backend.evaluate(requests))

    def evaluate(self, round_: int, requests: list[tuple[Candidate, Problem]]) -> None:
        """Compiles `requests` (overlapped with evaluation when the backend streams its builds), then evaluates them
        in chunks within the budget, storing and learning from each verdict as it arrives: those whose builds are in
        first, then those whose builds were still compiling (each group in request order), so that a wave's new
        builds compile while its built kernels are evaluated."""
        began = time.monotonic()
        built, stream = self.start_compiles(requests)
        requests = sorted(requests, key=lambda request: request[0].build_key not in built)
        self.store.add_elapsed(self.run_id, time.monotonic() - began)
        start = 0
        try:
            while start < len(requests):
                if self.done():
                    return
                began = time.monotonic()
                end = self.ready_prefix(requests, start, built, stream)
                self.store.add_elapsed(self.run_id, time.monotonic() - began)
                self.mark = time.monotonic()
                chunk = requests[start:end]
                start = end
                if self.args.budget_evals is not None:
                    chunk = chunk[:self.args.budget_evals - self.store.evaluation_count(self.run_id)]
                runnable, failed = [], []
                for position, (cand, problem) in enumerate(chunk):
                    (runnable if built[cand.build_key] else failed).append((position, cand, problem))
                failed.reverse()
                for index, result in self.verdicts([(cand, problem) for _, cand, problem in runnable]):
                    checkpoint("verdict")
                    self.record_failed_builds(round_, failed, before=runnable[index][0])
                    self.record(round_, *runnable[index][1:], result)
                self.record_failed_builds(round_, failed, before=len(chunk))
        finally:
            if stream is not None:
                self.take_builds(stream, built, block=False)

    def start_compiles(self, requests: list[tuple[Candidate, Problem]]) -> tuple[dict[str, bool], queue.Queue | None]:
        """(build key -> ok for the builds known now, the queue the backend's streamed builds arrive on or None).
        A backend with `compile_iter` builds in a background thread while the loop evaluates what is built (the
        outcomes are stored as they are taken, by this thread); one without compiles everything first."""
        if not hasattr(self.backend, "compile_iter"):
            return self.compile(requests), None
        builds = {cand.build_key: cand for cand, _ in requests}
        built = self.compile([(cand, problem) for cand, problem in requests
                              if self.store.compile_outcome(cand.build_key) is not None
                              or cand.build_key in self.prebuilt])
        new = [cand for key, cand in builds.items() if key not in built]
        self.planned.clear()
        if not new:
            return built, None
        stream: queue.Queue = queue.Queue()

        def work() -> None:
            try:
                for key, outcome in self.backend.compile_iter(new):
                    stream.put((key, outcome))
            except BaseException as exc:  # noqa: BLE001 (raised by the loop's thread when it takes it)
                stream.put(exc)
            finally:
                stream.put(None)

        threading.Thread(target=work, name="search-compiles", daemon=True).start()
        return built, stream

    def take_builds(self, stream: queue.Queue, built: dict[str, bool], block: bool = True,
                    until: str | None = None) -> None:
        """Stores the build outcomes that arrived on `stream` (waiting for them with `block`, until build `until`
        is in or the stream ends)."""
        while until is None or until not in built:
            try:
                item = stream.get(block=block)
            except queue.Empty:
                return
            if item is None:
                if until is not None and until not in built:
                    raise RuntimeError(f"the backend's build stream ended without build {until}")
                return
            if isinstance(item, BaseException):
                raise item
            key, outcome = item
            self.store.add_compile(key, outcome, self.run_id)
            built[key] = outcome.ok

    def ready_prefix(self, requests: list[tuple[Candidate, Problem]], start: int, built: dict[str, bool],
                     stream: queue.Queue | None) -> int:
        """The end of the next chunk from `start`: at most `chunk` requests whose builds are in (waiting for the
        first one's build if it is not), in request order."""
        end = start
        while end < len(requests) and end - start < self.args.chunk:
            key = requests[end][0].build_key
            if key not in built:
                if end > start:
                    break
                self.take_builds(stream, built, until=key)
            end += 1
        if stream is not None:
            self.take_builds(stream, built, block=False)
        return end

    def record_failed_builds(self, round_: int, failed: list[tuple[int, Candidate, Problem]], before: int) -> None:
        """Records the requests of `failed` ((chunk position, candidate, problem), last position first) placed before
        chunk position `before` with their build's status (COMPILE_ERROR, or SCAN_REJECTED for a source the compile
        farm refused) and its log's tail: with a backend that delivers verdicts in request order, the policy learns
        from a chunk in request order."""
        while failed and failed[-1][0] < before:
            _, cand, problem = failed.pop()
            outcome = self.store.compile_outcome(cand.build_key)
            self.record(round_, cand, problem,
                        EvalResult(outcome.status, reason=outcome.log[-2000:], compile_s=outcome.seconds))

    def record(self, round_: int, cand: Candidate, problem: Problem, result: EvalResult) -> None:
        """Stores one verdict with its reward and the run time since the previous one, and learns from it."""
        value = reward(result, cand)
        now = time.monotonic()
        self.store.add_evaluation(self.run_id, round_, cand, problem, result, value, elapsed_s=now - self.mark)
        self.mark = now
        doc = result.baseline_cases
        if doc and (doc["fingerprint"], doc["problem"]) not in self.baselines:
            self.baselines.add((doc["fingerprint"], doc["problem"]))
            self.store.add_baseline(doc)
        self.policy.update(problem, cand, value)
        if result.speedup is not None:
            self._remember(problem.key, cand, result.us, result.speedup)
        if self.on_eval:
            self.on_eval(self.store.evaluation_count(self.run_id), geomean(list(self.best_speedups().values())))

    def close_round(self, round_: int) -> None:
        """Saves the policy snapshot that marks `round_` finished and updates the LLM's memory file."""
        self.store.save_policy(self.run_id, round_, self.policy.to_json())
        if self.args.llm != "none" and self.args.memory:
            memory_hook(self.store, self.args.memory)

    def finish_stopped(self) -> int:
        """Finishes what a stopped run left: the proposals of the problems its last round had not reached (a round
        without a policy snapshot), then every proposal without a verdict, then that round's snapshot. Returns the
        next round."""
        last = self.store.last_round(self.run_id)
        unfinished = last >= 0 and last not in self.store.snapshot_rounds(self.run_id)
        for round_, group in itertools.groupby(self.pending(), key=lambda item: item[0]):
            self.evaluate(round_, [(cand, problem) for _, cand, problem in group])
        if not unfinished:
            return last + 1
        proposed = self.store.proposed_problems(self.run_id, last)
        if self.play_round(last, [p for p in self.problems if p.key not in proposed]) is None:
            return last  # the budget ran out again before every problem of the round was proposed
        self.close_round(last)
        return last + 1

    def play_round(self, round_: int, problems: list[Problem]) -> int | None:
        """Proposes for `problems` of `round_` and evaluates the proposals, `wave` problems at a time (all at once
        without it), so each wave's proposals follow what the policy learned from the waves before. Returns how many
        requests it made, or None when the budget ran out before every problem was proposed (the round stays open:
        a resume proposes the rest)."""
        step = self.args.wave or max(1, len(problems))
        made = 0
        for first in range(0, len(problems), step):
            if self.done():
                return None
            requests = self.propose(round_, problems[first:first + step])
            made += len(requests)
            self.evaluate(round_, requests)
        return made

    def run(self) -> None:
        """Rounds until the budget is spent (one proposal round, compiled only, with `compile_only`)."""
        if self.args.compile_only:
            self.compile(self.propose(self.store.last_round(self.run_id) + 1))
            return
        round_ = self.finish_stopped()
        while not self.done():
            made = self.play_round(round_, self.problems)
            if not made:
                break  # the budget ran out mid-round (None: the round stays open) or every proposer is exhausted
            self.close_round(round_)
            round_ += 1
        self.store.finish_run(self.run_id)
