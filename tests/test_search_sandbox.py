"""The candidate runner's pieces that need no GPU: the kernel C ABI structs read through ctypes from a real
kernel library (host-only entry points), the CUDA runtime bindings, and the runner's answer when it cannot start.
The runner's GPU work is tested in tests/gpu/test_search_cheats_gpu.py."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from build_tools import kernel_lib
from search.cuda_runtime import CudaProblem, IpcHandle, Runtime
from search.judge_timing import MAX_CALLS, TimingSets
from search.sandbox import find_kernel
from search_abi_kernels import naive_source

REPO = Path(__file__).resolve().parent.parent


def test_abi_structs_match_a_compiled_library(tmp_path, kernel_toolchain):
    source = tmp_path / "sm80" / "naive_abi.cu"
    source.parent.mkdir()
    source.write_text(naive_source("naive_abi"))
    obj = kernel_lib.compile_object(source, ["80"], tmp_path / "cache")
    kernel_lib.link_library({"naive_abi": obj}, tmp_path / "lib.so", ["80"])
    kernel = find_kernel(ctypes.CDLL(str(tmp_path / "lib.so"), mode=os.RTLD_NOW | os.RTLD_LOCAL), "naive_abi")
    assert (kernel.abi_version, kernel.name, kernel.family) == (1, b"naive_abi", b"test_naive")
    assert (kernel.dtype, kernel.layout, kernel.sm_min, kernel.sm_max) == (0, 1, 80, 90)
    problem = CudaProblem(64, 48, 32, 0x1000, 32, 0x2000, 32, 0x3000, 48, None, 0, 1, None, 0, None, 132, 0, 0, 0)
    assert kernel.can_implement(ctypes.byref(problem)) == 0 and kernel.workspace_size(ctypes.byref(problem)) == 0
    problem.dtype = 1
    assert kernel.can_implement(ctypes.byref(problem)) == 1        # CUDAL2_UNSUPPORTED: a bf16 problem
    problem.dtype, problem.ldd = 0, 47
    assert kernel.can_implement(ctypes.byref(problem)) == 4        # CUDAL2_BAD_ARGUMENT: ldd < N


def test_ipc_handles_keep_every_byte():
    handle = bytes(range(64))[::-1]          # zero bytes inside: a char array would cut the handle there
    assert bytes(IpcHandle.of(handle).reserved) == handle


def test_runtime_bindings_resolve(kernel_toolchain):
    runtime = Runtime()
    assert runtime.lib.cudaGetErrorString(2).decode()    # every bound symbol was found at construction


def test_a_runner_that_cannot_start_says_why():
    setup = {"library": "/nonexistent/lib.so", "kernel": "k", "memory": ["00" * 64], "events": {"go": "00" * 64,
                                                                                                 "done": "00" * 64}}
    proc = subprocess.run([sys.executable, "-m", "search.sandbox"], input=json.dumps(setup) + "\n", cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    reply = json.loads(proc.stdout.splitlines()[0])
    assert reply["ready"] is False and reply["error"].split(":")[0] in ("CudaError", "OSError")


def test_timed_replays_are_sized_by_the_baseline():
    tiny = TimingSets.calls_for(64, 64, 64, torch.float16, est_us=4.0)
    assert tiny == MAX_CALLS
    large = TimingSets.calls_for(8192, 8192, 8192, torch.float16, est_us=1400.0)
    assert large == 2
    assert TimingSets.calls_for(256, 256, 4096, torch.float16, est_us=20.0) == 100
