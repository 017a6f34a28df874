"""The candidate runner: the only process that loads a candidate kernel library, started afresh for each batch (or
kept for the next batch after a config candidate it ran passed: `unmap`, then `map`).

It imports neither torch nor the extension: through ctypes (`search.cuda_runtime`) it opens the device memory and
the two interprocess events the judge (`search.eval_worker`) shares with it, makes its own non-blocking stream (the
"caller's stream" the candidate is given), loads the library and runs the kernel on buffers the judge owns, as the
judge asks, one JSON line per request and per answer:

    {"op": "query", "problem": P}                  -> {"can_implement": status, "workspace": bytes}
    {"op": "call", "problem": P, "gated": bool}    -> {"status": s}   (gated: the stream first waits on the judge's
                                                      "go" event, and "done" is recorded after the launch)
    {"op": "sync"}                                 -> {"error": ""}   (device-wide; a fault of the kernel shows here)
    {"op": "capture", "problems": [P, ...]}        -> {"statuses", "nodes": {type: count}, "error"}
    {"op": "replay", "empty": bool}                -> {}  (waits on "go", replays the captured graph, records "done")
    {"op": "timed"}                                -> {"us": runner-side event time of the last replay}
    {"op": "heat", "replays": n}                   -> {"error"}  (the captured graph n times back to back, untimed,
                                                      then a sync of the stream: the GPU kept busy in one request)
    {"op": "eager", "calls": n}                    -> {"nonzero": statuses != 0}  (the captured problems in turn;
                                                      device-wide sync around)
    {"op": "ping"}                                 -> {}
    {"op": "load", "library": path, "kernel": name} -> {"kernel": {...}} or {"error"}  (the next candidate of a
                                                      batch: replaces the kernel and drops the captured graph)
    {"op": "unmap"}                                -> {"error": ""}  (device-wide sync, then every shared region
                                                      closed and the captured graph dropped: the batch is over)
    {"op": "map", "memory": [hex]}                 -> {"error": ""}  (the next batch's regions)

P names buffers as [region, byte offset] into the shared regions. The ready line reports the kernel and whether
CUDAL2_DISABLE_PDL=1 reached this process (the judge refuses a runner with PDL on). Everything this process
reports is treated as untrusted by the judge: outputs are read back from the judge's own memory, timings are
taken by the judge's own events around this process's work, and a candidate that patches this process (a
constructor slipping past the object check) can lie only about what the judge cross-checks. The process dies with
its parent (PR_SET_PDEATHSIG).

    python -m search.sandbox     # first line on stdin: {"library", "kernel", "memory": [hex], "events": {...}}
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from ctypes import POINTER, byref, c_int

from search.cuda_runtime import CAPTURE_MODE_GLOBAL, CudaError, CudaKernel, CudaProblem, Runtime

PR_SET_PDEATHSIG = 1
PDL_ENV = "CUDAL2_DISABLE_PDL"
LOAD_ERRORS = (OSError, LookupError, CudaError, AttributeError, ValueError)  # a library or kernel that cannot load


class RunnerDied(RuntimeError):
    """Raised by the judge's client (`search.runner_client`) when this process exited, did not answer in time, or
    reported a fault of the candidate's kernel; `status` is CRASH or HANG. The judge restarts itself after one, since
    its streams may wait on an event this process will never record."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


def die_with_parent() -> None:
    """Asks the kernel to kill this process when its parent (the judge) dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


def find_kernel(library: ctypes.CDLL, name: str) -> CudaKernel:
    """The descriptor of kernel `name` in a kernel library (via its `cudal2_kernel_library` index)."""
    index = library.cudal2_kernel_library
    index.restype = POINTER(POINTER(CudaKernel))
    index.argtypes = [POINTER(c_int)]
    count = c_int()
    kernels = index(byref(count))
    for i in range(count.value):
        if kernels[i] and kernels[i].contents.name.decode(errors="replace") == name:
            return kernels[i].contents
    raise LookupError(f"kernel {name!r} is not in the library ({count.value} kernels)")


class Runner:
    """Drives one kernel of one library on the shared buffers."""

    def __init__(self, setup: dict):
        self.rt = Runtime()
        self.rt.call("cudaSetDevice", 0)
        self.rt.call("cudaFree", None)   # creates the context
        self.bases = [self.rt.open_mem_handle(bytes.fromhex(h)) for h in setup["memory"]]
        self.go = self.rt.open_event_handle(bytes.fromhex(setup["events"]["go"]))
        self.done = self.rt.open_event_handle(bytes.fromhex(setup["events"]["done"]))
        self.stream = self.rt.stream()
        self.start, self.end = self.rt.event(), self.rt.event()
        self.sm_count = self.rt.sm_count()
        self.load(setup["library"], setup["kernel"])

    def load(self, library: str, kernel: str) -> None:
        """Makes `kernel` of `library` the one this runner drives (no graph captured yet)."""
        self.library = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.kernel = find_kernel(self.library, kernel)
        self.graph_exec = None
        self.captured: list[CudaProblem] = []

    def describe(self) -> dict:
        k = self.kernel
        return {"abi_version": k.abi_version, "family": (k.family or b"").decode(errors="replace"),
                "dtype": k.dtype, "layout": k.layout, "sm_min": k.sm_min, "sm_max": k.sm_max,
                "pdl_disabled": os.environ.get(PDL_ENV) == "1"}

    def problem(self, spec: dict) -> CudaProblem:
        def ptr(ref):
            return None if ref is None else self.bases[ref[0]] + ref[1]
        return CudaProblem(spec["m"], spec["n"], spec["k"], ptr(spec["a"]), spec["lda"], ptr(spec["b"]), spec["ldb"],
                           ptr(spec["d"]), spec["ldd"], ptr(spec.get("bias")), spec["dtype"], spec["layout"],
                           ptr(spec.get("workspace")), spec.get("workspace_bytes", 0), self.stream, self.sm_count,
                           spec.get("splits", 0), spec.get("swizzle", 0), spec.get("raster", 0))

    def launch(self, problem: CudaProblem) -> int:
        return int(self.kernel.launch(byref(problem)))

    def handle(self, request: dict) -> dict:
        op = request["op"]
        if op == "ping":
            return {}
        if op == "query":
            p = self.problem(request["problem"])
            return {"can_implement": int(self.kernel.can_implement(byref(p))),
                    "workspace": int(self.kernel.workspace_size(byref(p)))}
        if op == "call":
            p = self.problem(request["problem"])
            if request.get("gated"):
                self.rt.call("cudaStreamWaitEvent", self.stream, self.go, 0)
            status = self.launch(p)
            if request.get("gated"):
                self.rt.call("cudaEventRecord", self.done, self.stream)
            return {"status": status}
        if op == "load":
            try:
                self.load(request["library"], request["kernel"])
            except LOAD_ERRORS as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
            return {"kernel": self.describe()}
        if op == "sync":
            return {"error": self._error("cudaDeviceSynchronize")}
        if op == "unmap":
            error = self._error("cudaDeviceSynchronize")
            for base in self.bases:
                error = error or self._error("cudaIpcCloseMemHandle", base)
            self.bases, self.graph_exec, self.captured = [], None, []
            return {"error": error}
        if op == "map":
            self.bases = [self.rt.open_mem_handle(bytes.fromhex(h)) for h in request["memory"]]
            return {"error": ""}
        if op == "capture":
            return self.capture([self.problem(spec) for spec in request["problems"]])
        if op == "replay":
            self.rt.call("cudaStreamWaitEvent", self.stream, self.go, 0)
            self.rt.call("cudaEventRecord", self.start, self.stream)
            if not request.get("empty"):
                self.rt.call("cudaGraphLaunch", self.graph_exec, self.stream)
            self.rt.call("cudaEventRecord", self.end, self.stream)
            self.rt.call("cudaEventRecord", self.done, self.stream)
            return {}
        if op == "timed":
            error = self._error("cudaStreamSynchronize", self.stream)
            return {"error": error, "us": None if error else self.rt.elapsed_ms(self.start, self.end) * 1e3}
        if op == "heat":
            if self.graph_exec is None:
                return {"error": "heat before a capture"}
            for _ in range(request["replays"]):
                self.rt.call("cudaGraphLaunch", self.graph_exec, self.stream)
            return {"error": self._error("cudaStreamSynchronize", self.stream)}
        if op == "eager":
            problems = self.captured
            if not problems:
                return {"error": "eager calls before a capture", "nonzero": 0}
            self.rt.call("cudaDeviceSynchronize")
            nonzero = sum(self.launch(problems[i % len(problems)]) != 0 for i in range(request["calls"]))
            return {"nonzero": nonzero, "error": self._error("cudaDeviceSynchronize")}
        raise ValueError(f"unknown op {op!r}")

    def _error(self, name: str, *args) -> str:
        try:
            self.rt.call(name, *args)
        except CudaError as exc:
            return str(exc)
        return ""

    def capture(self, problems: list[CudaProblem]) -> dict:
        """Captures one launch per problem on the stream into a graph; its node census, instantiated for replay."""
        self.rt.call("cudaStreamBeginCapture", self.stream, CAPTURE_MODE_GLOBAL)
        statuses = []
        for p in problems:
            statuses.append(self.launch(p))
            if statuses[-1]:
                break
        try:
            graph = self.rt.end_capture(self.stream)
        except CudaError as exc:
            self.rt.lib.cudaGetLastError()
            return {"statuses": statuses, "nodes": {}, "error": f"the capture failed: {exc}"}
        nodes = self.rt.node_census(graph)
        self.captured = problems
        if any(statuses):
            return {"statuses": statuses, "nodes": nodes, "error": ""}
        self.graph_exec = self.rt.instantiate(graph)
        return {"statuses": statuses, "nodes": nodes, "error": ""}


def main() -> None:
    die_with_parent()
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)            # the candidate's prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    setup = json.loads(sys.stdin.readline())
    try:
        runner = Runner(setup)
        reply = {"ready": True, "kernel": runner.describe()}
    except LOAD_ERRORS as exc:
        reply, runner = {"ready": False, "error": f"{type(exc).__name__}: {exc}"}, None
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
    if runner is None:
        return
    for line in sys.stdin:
        request = json.loads(line)
        start = time.monotonic()
        try:
            reply = runner.handle(request)
        except CudaError as exc:
            reply = {"error": str(exc)}
        reply["runner_s"] = time.monotonic() - start
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
