"""The evaluator pool: one `search.eval_worker` process (the judge) per visible GPU, fed JSON lines, with crash and
hang isolation.

Requests go to the workers in batches (consecutive requests for one problem: one runner process and one set of
buffers for the batch, the problem's baseline timed once and reused, `search.eval_worker`). A candidate that makes
its worker exit (a fault, an abort) is a CRASH; one that outlives `timeout_s` is a HANG: the worker is killed and
restarted, the verdict carries the reason (exit status and the tail of the worker's stderr), the batch's later
candidates are queued again and the other requests go on. Batches are spread over the workers; `evaluate_iter` hands
each verdict back as its worker answers (so the search can store it at once), `evaluate` all of them in request
order. Workers run with PDL off (CUDAL2_DISABLE_PDL=1, whatever the caller's environment says): rewards are measured
without the overlap PDL gives back-to-back calls, and the workers' environment (hence the store's run metadata)
records it.
"""
from __future__ import annotations

import collections
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from search.backend import in_request_order
from search.baseline_cache import BaselineCache
from search.candidate import CRASH, HANG, Candidate, EvalResult, Problem
from search.eval_worker import PDL_ENV, PEAK_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300.0   # torch import, CUDA context and the roofline measurement
STDERR_TAIL = 3000


def visible_gpus() -> list[str]:
    """The GPUs to run workers on: CUDA_VISIBLE_DEVICES's entries if set, else 0..device_count-1."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        return [d.strip() for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    import torch  # noqa: PLC0415 (only to count GPUs)
    return [str(i) for i in range(torch.cuda.device_count())]


class WorkerDied(RuntimeError):
    """The worker exited or stopped answering; `status` is CRASH or HANG."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


class Worker:
    """One evaluation worker process bound to `gpu` (CUDA_VISIBLE_DEVICES), restarted after a crash or hang."""

    def __init__(self, gpu: str, extra_env: dict[str, str] | None = None):
        self.gpu = gpu
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.environment: dict[str, Any] = {}

    def start(self) -> None:
        env = {**os.environ, **self.extra_env, "CUDA_VISIBLE_DEVICES": self.gpu, PDL_ENV: "1"}
        if "peak_tflops" in self.environment:
            env[PEAK_ENV] = str(self.environment["peak_tflops"])
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "search.eval_worker"], cwd=REPO_ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        ready = json.loads(self._reply(START_TIMEOUT_S))
        self.environment = ready["environment"]

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put("")  # end of stream: the worker exited

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-STDERR_TAIL:]

    def _reply(self, timeout_s: float) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            tail = self._stderr_tail()
            self.stop()
            raise WorkerDied(HANG, f"no answer within {timeout_s:.0f} s on GPU {self.gpu}; worker killed. stderr: "
                                   f"{tail}") from None
        if not line:
            code, tail = self.proc.wait(), self._stderr_tail()
            self.stop()
            raise WorkerDied(CRASH, f"worker on GPU {self.gpu} exited with status {code}. stderr: {tail}")
        return line

    def judge(self, payload: dict, timeout_s: float) -> Iterator[EvalResult]:
        """Sends one batch (payload["candidates"]); each candidate's verdict as the worker answers, within
        `timeout_s` each. After a CRASH or HANG (the worker is then stopped and restarted on the next batch) the
        iteration ends: the batch's later candidates got no verdict."""
        try:
            if self.proc is None:
                self.start()
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            tail = self._stderr_tail()
            self.stop()
            yield EvalResult(CRASH, reason=f"worker on GPU {self.gpu} exited before the request: {tail}",
                             gpu=self.environment)
            return
        except WorkerDied as died:
            yield EvalResult(died.status, reason=str(died), gpu=self.environment)
            return
        for _ in payload["candidates"]:
            try:
                reply = json.loads(self._reply(timeout_s))
            except WorkerDied as died:
                yield EvalResult(died.status, reason=str(died), gpu=self.environment)
                return
            if reply["restart"]:
                self.stop()
            yield EvalResult(**reply["result"])
            if reply["restart"]:
                return

    def fingerprint(self) -> str:
        """The baseline fingerprint of this worker's GPU (search.baseline_cache; the worker is started first)."""
        if self.proc is None:
            self.start()
        return self.environment.get("baseline_fingerprint", "")

    def stop(self) -> None:
        """Kills the worker process (if running) and drops its stderr log."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.stderr.close()


def batches(requests: list[tuple[Candidate, Problem, str]], size: int) -> list[list[int]]:
    """Request indices grouped into batches: runs of consecutive requests for the same problem, at most `size`."""
    out: list[list[int]] = []
    for i, (_, problem, _) in enumerate(requests):
        if out and len(out[-1]) < size and requests[out[-1][0]][1] == problem:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def largest_first(batches_: list[list[int]], requests: list[tuple[Candidate, Problem, str]]) -> list[list[int]]:
    """The batches in decreasing problem size (M*N*K; stable for equal sizes): a large problem's batch takes seconds,
    and handed out last it kept the other GPUs idle at the end of every round (21-31 s of a 60-80 s round of 400
    evaluations on 4 H200s). Verdicts are stored as they arrive and counted by the study in proposal order."""
    def size(batch: list[int]) -> int:
        problem = requests[batch[0]][1]
        return problem.m * problem.n * problem.k
    return sorted(batches_, key=size, reverse=True)


class EvaluatorPool:
    """Evaluates (candidate, problem) pairs on one worker per GPU; `artifacts` maps build keys to shared libraries.

    `timeout_s` bounds one candidate (all of its test cases); `cases` test cases per problem; up to `batch`
    consecutive requests for the same problem go to a worker as one batch (one runner process and one set of
    buffers, search.eval_worker). `baselines` holds the judges' baseline documents (search.baseline_cache): each
    batch carries its problem's, so a problem's baseline is timed once per GPU fingerprint, across worker restarts,
    and `use_baselines` seeds it from a store.
    """

    def __init__(self, gpus: list[str] | None = None, timeout_s: float = 300.0, cases: int = 3,
                 extra_env: dict[str, str] | None = None, batch: int = 8):
        gpus = visible_gpus() if gpus is None else gpus
        if not gpus:
            raise RuntimeError("no GPU to evaluate on (CUDA_VISIBLE_DEVICES names none and torch sees no CUDA device)")
        if batch < 1:
            raise ValueError(f"batch must be >= 1 (got {batch})")
        self.workers = [Worker(gpu, extra_env) for gpu in gpus]
        self.timeout_s, self.cases, self.batch = timeout_s, cases, batch
        self.baselines = BaselineCache()
        self._lock = threading.Lock()

    def use_baselines(self, docs: list[dict]) -> None:
        """Adds baseline documents timed earlier (a resumed run's store)."""
        with self._lock:
            for doc in docs:
                self.baselines.add(doc)

    def environment(self) -> dict[str, Any]:
        """The first worker's GPU environment (gpu_name, arch, sm_count, driver, cuda, torch, ...)."""
        worker = self.workers[0]
        if worker.proc is None:
            worker.start()
        return worker.environment

    def evaluate(self, requests: list[tuple[Candidate, Problem, str]]) -> list[EvalResult]:
        """Verdicts on (candidate, problem, shared library path) triples, in order."""
        return in_request_order(self.evaluate_iter(requests), len(requests))

    def _payload(self, worker: Worker, requests: list[tuple[Candidate, Problem, str]], batch: list[int]) -> dict:
        problem = requests[batch[0]][1]
        with self._lock:
            baseline = self.baselines.get(worker.fingerprint(), problem.key, self.cases)
        return {"problem": problem.__dict__, "cases": self.cases, "timeout_s": self.timeout_s, "baseline": baseline,
                "candidates": [{"candidate": requests[i][0].to_json(), "artifact": requests[i][2]} for i in batch]}

    def _next_batch(self, todo: collections.deque, worker: Worker,
                    requests: list[tuple[Candidate, Problem, str]]) -> list[int]:
        """The first batch of `todo` whose problem's baseline `worker`'s GPU has timed, else the first: a problem
        stays on the card that timed its baseline (a baseline is per card: search.baseline_cache) while no worker
        waits for it. Called under the pool's lock."""
        fingerprint = worker.environment.get("baseline_fingerprint")
        if fingerprint and len(self.workers) > 1:
            for position, batch in enumerate(todo):
                if self.baselines.get(fingerprint, requests[batch[0]][1].key, self.cases):
                    del todo[position]
                    return batch
        return todo.popleft()

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem, str]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict) of (candidate, problem, shared library path) triples, each as soon as its worker
        answers (batches of larger problems first, `largest_first`; a batch's candidates in request order). Leaving
        the iteration early stops handing out batches; those in
        flight finish first. The candidates of a batch after one that crashed or hung its worker go back to the
        front of the queue. An error of the pool itself (not a candidate's: those are verdicts) is raised here."""
        size = max(1, min(self.batch, math.ceil(len(requests) / len(self.workers))))  # every worker gets work
        todo = collections.deque(largest_first(batches(requests, size), requests))
        answers: queue.Queue[tuple[int, EvalResult] | BaseException | None] = queue.Queue()
        stop = threading.Event()

        def drain(worker: Worker) -> None:
            try:
                while not stop.is_set():
                    with self._lock:
                        if not todo:
                            return
                        batch = self._next_batch(todo, worker, requests)
                    try:
                        payload = self._payload(worker, requests, batch)
                    except WorkerDied as died:   # the worker did not start: the batch's first candidate's verdict
                        answers.put((batch[0], EvalResult(died.status, reason=str(died), gpu=worker.environment)))
                        with self._lock:
                            todo.extendleft([batch[1:]] if len(batch) > 1 else [])
                        continue
                    judged = 0
                    for result in worker.judge(payload, self.timeout_s):
                        if result.baseline_cases:
                            with self._lock:
                                self.baselines.add(result.baseline_cases)
                        answers.put((batch[judged], result))
                        judged += 1
                    if judged < len(batch):
                        with self._lock:
                            todo.appendleft(batch[judged:])
            except BaseException as exc:  # noqa: BLE001 (handed to the consumer, which raises it)
                answers.put(exc)
            finally:
                answers.put(None)  # this worker's thread is done

        threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        try:
            running = len(threads)
            while running:
                answer = answers.get()
                if answer is None:
                    running -= 1
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    yield answer
        finally:
            stop.set()
            for t in threads:
                t.join()

    def close(self) -> None:
        """Stops every worker."""
        for worker in self.workers:
            worker.stop()
