"""The judge's side of the candidate runner (`search.sandbox`): shared memory, the two events, the process itself.

The judge owns every buffer the candidate touches. `SharedRegion`s are plain cudaMalloc allocations (sharing one
through CUDA IPC exposes that allocation and nothing else of the judge's memory) seen by the judge as torch uint8
tensors. The "go" and "done" interprocess events order the runner's stream after the judge's current stream and the
judge's current stream after the runner's work, so a call through the runner is stream-ordered like a call in
process. Every request has a time limit; a runner that exits or does not answer is a `RunnerDied` (CRASH / HANG)
and is killed. `RunnerImpl` is the correctness checks' `impl(a, b, bias, out)`: it copies each tensor's whole
storage (guard bands included) into the scratch region, runs the candidate there and copies every storage back.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from search.candidate import CRASH, HANG
from search.cuda_runtime import Runtime
from search.sandbox import PDL_ENV, RunnerDied

REPO_ROOT = Path(__file__).resolve().parent.parent
ALIGN = 256
DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1}
LAYOUT_CODES = {"nn": 0, "nt": 1}


class SharedRegion:
    """`nbytes` of device memory from cudaMalloc, as a torch uint8 tensor (`tensor`) with its IPC handle."""

    def __init__(self, rt: Runtime, nbytes: int):
        self.rt, self.nbytes = rt, max(nbytes, ALIGN)
        self.ptr = rt.malloc(self.nbytes)
        self.handle = rt.ipc_mem_handle(self.ptr).hex()
        interface = {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3,
                     "strides": None}
        self.tensor = torch.as_tensor(type("CudaArray", (), {"__cuda_array_interface__": interface})(),
                                      device="cuda")

    def view(self, offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous tensor of `shape` and `dtype` at byte `offset` of the region."""
        count = 1
        for s in shape:
            count *= s
        size = count * torch.empty((), dtype=dtype).element_size()
        if offset + size > self.nbytes:
            raise ValueError(f"a view of {size} bytes at {offset} overruns the {self.nbytes}-byte region")
        return self.tensor[offset:offset + size].view(dtype).view(shape)

    def close(self) -> None:
        """Frees the allocation (every view of it must be gone, and the runner closed)."""
        if self.ptr:
            self.tensor = None
            torch.cuda.synchronize()
            self.rt.call("cudaFree", self.ptr)
            self.ptr = 0


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class RunnerClient:
    """A runner process for one kernel of one library, given `regions` and the judge's go/done events; PDL off in it
    (CUDAL2_DISABLE_PDL=1 whatever this process's environment says)."""

    def __init__(self, library: str, kernel: str, regions: list[SharedRegion], timeout_s: float,
                 env: dict[str, str] | None = None):
        self.timeout_s = timeout_s
        self.go = torch.cuda.Event(interprocess=True)
        self.done = torch.cuda.Event(interprocess=True)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "search.sandbox"], cwd=REPO_ROOT, text=True, bufsize=1,
                                     env={**os.environ, **(env or {}), PDL_ENV: "1"}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        setup = {"library": library, "kernel": kernel, "memory": [r.handle for r in regions],
                 "events": {"go": bytes(self.go.ipc_handle()).hex(), "done": bytes(self.done.ipc_handle()).hex()}}
        ready = self._send(setup)
        if not ready.get("ready"):
            self.close()
            raise LookupError(ready.get("error", "the runner could not load the kernel"))
        self.kernel = ready["kernel"]
        # the judge's least empty bracket around this runner's replay (judge_timing.Bracket.overhead_us), measured
        # by the batch's first candidate: an empty replay holds no kernel, so the batch's later ones share it
        self.overhead_us: float | None = None

    def load(self, library: str, kernel: str) -> None:
        """Has this runner drive `kernel` of `library` next (a batch's next config candidate); LookupError when it
        cannot be loaded."""
        answer = self.request("load", library=library, kernel=kernel)
        if answer.get("error"):
            raise LookupError(answer["error"])
        self.kernel = answer["kernel"]

    def unmap(self) -> bool:
        """Ends the batch on the runner's side (its shared regions closed, after a device-wide sync); False when the
        runner reported an error (it should then be closed)."""
        return not self.request("unmap").get("error")

    def map(self, regions: list[SharedRegion], timeout_s: float) -> None:
        """Gives a runner kept from the previous batch this batch's `regions` and time limit."""
        self.timeout_s = timeout_s
        self.overhead_us = None   # measured again in each batch
        answer = self.request("map", memory=[r.handle for r in regions])
        if answer.get("error"):
            raise LookupError(answer["error"])

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of the runner's stderr (the candidate's prints and errors go there)."""
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-chars:]

    def _send(self, message: dict, timeout_s: float | None = None) -> dict:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            line = ""
        else:
            try:
                line = self.lines.get(timeout=timeout_s or self.timeout_s)
            except queue.Empty:
                tail = self.stderr_tail()
                self.close()
                raise RunnerDied(HANG, f"the candidate runner did not answer {message.get('op', 'setup')!r} within "
                                       f"{timeout_s or self.timeout_s:.0f} s; killed. stderr: {tail}") from None
        if not line:
            code = self.proc.wait()
            tail = self.stderr_tail()
            self.close()
            raise RunnerDied(CRASH, f"the candidate runner exited with status {code} during "
                                    f"{message.get('op', 'setup')!r}. stderr: {tail}")
        return json.loads(line)

    def request(self, op: str, **fields) -> dict:
        """Sends one request; the runner's answer. Raises RunnerDied (the runner is then killed)."""
        return self._send({"op": op, **fields})

    def close(self) -> None:
        """Kills the runner (its CUDA context and anything still running in it go with it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if not self.stderr.closed:
            self.stderr.close()


def wait_event(event: torch.cuda.Event, runner: RunnerClient) -> None:
    """Waits for `event` on the host for at most the runner's time limit; a runner whose work never completes is a
    HANG (killed)."""
    deadline = time.monotonic() + runner.timeout_s
    pause = 1e-5
    while not event.query():
        if time.monotonic() > deadline:
            tail = runner.stderr_tail()
            runner.close()
            raise RunnerDied(HANG, f"the candidate's work did not complete within {runner.timeout_s:.0f} s; killed. "
                                   f"stderr: {tail}")
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


def problem_spec(m: int, n: int, k: int, dtype: torch.dtype, layout: str, refs: dict, lds: dict, knobs,
                 workspace_bytes: int = 0) -> dict:
    """A problem for the runner: `refs` maps a, b, d (and optionally bias, workspace) to [region, byte offset]."""
    return {"m": m, "n": n, "k": k, "a": refs["a"], "lda": lds["a"], "b": refs["b"], "ldb": lds["b"], "d": refs["d"],
            "ldd": lds["d"], "bias": refs.get("bias"), "dtype": DTYPE_CODES[dtype], "layout": LAYOUT_CODES[layout],
            "workspace": refs.get("workspace"), "workspace_bytes": workspace_bytes, "splits": knobs[0],
            "swizzle": knobs[1], "raster": knobs[2]}


class RunnerImpl:
    """The candidate as an `impl(a, b, bias, out, workspace=None)` of the correctness checks, run by `runner` on
    copies of the tensors' storages in region `scratch_index` (`scratch`). With `synchronous`, each call ends with a
    device-wide synchronize in the runner, so a fault is reported (RunnerDied, CRASH) at the call that caused it."""

    def __init__(self, runner: RunnerClient, scratch: SharedRegion, scratch_index: int, layout: str, knobs,
                 workspace_limit: int):
        self.runner, self.scratch, self.index = runner, scratch, scratch_index
        self.layout, self.knobs, self.workspace_limit = layout, knobs, workspace_limit
        self.synchronous = True

    def _stage(self, tensors: dict[str, torch.Tensor | None]) -> tuple[dict, list]:
        """Copies each tensor's storage into the scratch region; the [region, offset] of each tensor's first
        element and the (scratch view, storage view) pairs to copy back."""
        refs, pairs, offset = {}, [], 0
        for name, t in tensors.items():
            if t is None:
                continue
            storage = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            staged = self.scratch.tensor[offset:offset + storage.numel()]
            if staged.numel() != storage.numel():
                raise ValueError(f"{name}: {storage.numel()} bytes do not fit the {self.scratch.nbytes}-byte scratch")
            staged.copy_(storage)
            refs[name] = [self.index, offset + t.data_ptr() - t.untyped_storage().data_ptr()]
            pairs.append((staged, storage))
            offset = aligned(offset + storage.numel())
        return refs, pairs

    def _spec(self, a, b, bias, out, refs: dict, workspace_bytes: int) -> dict:
        m, k = a.shape
        n = out.shape[1]
        return problem_spec(m, n, k, a.dtype, self.layout, refs, {"a": a.stride(0), "b": b.stride(0),
                                                                  "d": out.stride(0)}, self.knobs, workspace_bytes)

    def workspace_bytes(self, a, b, bias, out) -> int:
        """The workspace the candidate asks for on this problem (the guard check fences it)."""
        refs, _ = self._stage({"a": a, "b": b, "bias": bias, "d": out})
        answer = self.runner.request("query", problem=self._spec(a, b, bias, out, refs, 0))
        return min(int(answer["workspace"]), self.workspace_limit)

    def __call__(self, a, b, bias, out, workspace: torch.Tensor | None = None):
        if workspace is None:
            workspace = torch.empty(self.workspace_bytes(a, b, bias, out), dtype=torch.uint8, device=a.device)
        refs, pairs = self._stage({"a": a, "b": b, "bias": bias, "d": out, "workspace": workspace})
        current = torch.cuda.current_stream()
        self.runner.go.record(current)
        answer = self.runner.request("call", problem=self._spec(a, b, bias, out, refs, workspace.numel()), gated=True)
        if answer.get("status"):
            raise CandidateDeclined(int(answer["status"]))
        if answer.get("error"):
            raise RunnerDied(CRASH, f"the candidate's launch failed: {answer['error']}")
        current.wait_event(self.runner.done)
        for staged, storage in pairs:
            storage.copy_(staged)
        if self.synchronous:
            error = self.runner.request("sync").get("error")
            if error:
                raise RunnerDied(CRASH, f"the candidate's kernel failed: {error}")
        return out


class CandidateDeclined(RuntimeError):
    """The launcher returned a nonzero ABI status (1 unsupported, 2 workspace, 3 launch failed, 4 bad argument)."""

    def __init__(self, status: int):
        super().__init__(f"the launcher returned status {status}")
        self.status = status
