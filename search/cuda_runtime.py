"""The CUDA runtime calls and kernel C ABI structs the evaluator's two processes use, through ctypes.

The candidate runner (`search.sandbox`) drives a candidate kernel with these calls without importing torch: it opens
device memory and events another process shares with it (IPC), makes its own stream, captures calls into a graph
and counts the graph's nodes by type. The judge (`search.eval_worker`) uses them to allocate the memory it shares
(a plain cudaMalloc, so that sharing exposes nothing else of its own). `CudaProblem` / `CudaKernel` mirror
csrc/include/cudal2/abi.h.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_ubyte,
                    c_uint, c_ulonglong, c_void_p)

EVENT_DISABLE_TIMING, EVENT_INTERPROCESS = 0x2, 0x4
STREAM_NON_BLOCKING = 0x1
CAPTURE_MODE_GLOBAL = 0
IPC_LAZY_ENABLE_PEER_ACCESS = 0x1
DEV_ATTR_MULTIPROCESSOR_COUNT = 16
NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "semaphore_signal", 9: "semaphore_wait", 10: "mem_alloc", 11: "mem_free",
              12: "batch_mem_op", 13: "conditional"}


class CudaProblem(Structure):
    """cudal2_problem (abi.h)."""

    _fields_ = [("m", c_int64), ("n", c_int64), ("k", c_int64), ("a", c_void_p), ("lda", c_int64),
                ("b", c_void_p), ("ldb", c_int64), ("d", c_void_p), ("ldd", c_int64), ("bias", c_void_p),
                ("dtype", c_int32), ("layout", c_int32), ("workspace", c_void_p), ("workspace_bytes", c_size_t),
                ("stream", c_void_p), ("sm_count", c_int32), ("splits", c_int32), ("swizzle", c_int32),
                ("raster", c_int32)]


ProblemFn = CFUNCTYPE(c_int, POINTER(CudaProblem))
SizeFn = CFUNCTYPE(c_size_t, POINTER(CudaProblem))


class CudaKernel(Structure):
    """cudal2_kernel (abi.h)."""

    _fields_ = [("abi_version", c_int32), ("name", c_char_p), ("family", c_char_p), ("sm_min", c_int32),
                ("sm_max", c_int32), ("dtype", c_int32), ("layout", c_int32), ("has_bias", c_int32),
                ("can_implement", ProblemFn), ("workspace_size", SizeFn), ("launch", ProblemFn)]


class IpcHandle(Structure):
    """cudaIpcMemHandle_t / cudaIpcEventHandle_t: 64 opaque bytes (unsigned bytes: a char array would stop at the
    first zero byte)."""

    _fields_ = [("reserved", c_ubyte * 64)]

    @classmethod
    def of(cls, handle: bytes) -> "IpcHandle":
        if len(handle) != 64:
            raise ValueError(f"an IPC handle is 64 bytes, got {len(handle)}")
        return cls.from_buffer_copy(handle)


class CudaError(RuntimeError):
    """A CUDA runtime call failed; `code` is the cudaError_t."""

    def __init__(self, what: str, code: int, text: str):
        super().__init__(f"{what}: CUDA error {code} ({text})")
        self.code = code


def cudart_candidates() -> list[str]:
    """Where a CUDA runtime library may be: already loaded or on the loader path, then torch's wheel, CUDA_HOME."""
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    found = list(names)
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so*")), reverse=True)
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so*")), reverse=True)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(os.path.join(home, "lib64", "libcudart.so*")), reverse=True)
    return found


def load_cudart() -> ctypes.CDLL:
    """The CUDA runtime shared library (the one already in the process when there is one)."""
    errors = []
    for candidate in cudart_candidates():
        try:
            return ctypes.CDLL(candidate)
        except OSError as exc:
            errors.append(str(exc))
    raise OSError(f"no CUDA runtime library found (tried {len(errors)} places; last: {errors[-1:]})")


_SIGNATURES = {
    "cudaSetDevice": [c_int], "cudaFree": [c_void_p], "cudaMalloc": [POINTER(c_void_p), c_size_t],
    "cudaIpcGetMemHandle": [POINTER(IpcHandle), c_void_p], "cudaIpcOpenMemHandle": [POINTER(c_void_p), IpcHandle, c_uint],
    "cudaIpcCloseMemHandle": [c_void_p], "cudaIpcOpenEventHandle": [POINTER(c_void_p), IpcHandle],
    "cudaEventCreateWithFlags": [POINTER(c_void_p), c_uint], "cudaEventRecord": [c_void_p, c_void_p],
    "cudaEventElapsedTime": [POINTER(c_float), c_void_p, c_void_p], "cudaEventDestroy": [c_void_p],
    "cudaStreamCreateWithFlags": [POINTER(c_void_p), c_uint], "cudaStreamWaitEvent": [c_void_p, c_void_p, c_uint],
    "cudaStreamSynchronize": [c_void_p], "cudaDeviceSynchronize": [], "cudaGetLastError": [],
    "cudaStreamBeginCapture": [c_void_p, c_int], "cudaStreamEndCapture": [c_void_p, POINTER(c_void_p)],
    "cudaGraphGetNodes": [c_void_p, POINTER(c_void_p), POINTER(c_size_t)],
    "cudaGraphNodeGetType": [c_void_p, POINTER(c_int)], "cudaGraphChildGraphNodeGetGraph": [c_void_p, POINTER(c_void_p)],
    "cudaGraphInstantiate": [POINTER(c_void_p), c_void_p, c_ulonglong], "cudaGraphLaunch": [c_void_p, c_void_p],
    "cudaGraphDestroy": [c_void_p], "cudaGraphExecDestroy": [c_void_p],
    "cudaDeviceGetAttribute": [POINTER(c_int), c_int, c_int], "cudaGetErrorString": [c_int],
    "cudaMemset": [c_void_p, c_int, c_size_t],
}


class Runtime:
    """Checked wrappers of the CUDA runtime calls above (each raises CudaError naming the call)."""

    def __init__(self, lib: ctypes.CDLL | None = None):
        self.lib = lib or load_cudart()
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = c_char_p if name == "cudaGetErrorString" else c_int

    def check(self, code: int, what: str) -> None:
        """Raises CudaError when `code` is not cudaSuccess."""
        if code:
            raise CudaError(what, code, self.lib.cudaGetErrorString(code).decode(errors="replace"))

    def call(self, name: str, *args) -> None:
        """Calls runtime function `name` and checks its status."""
        self.check(getattr(self.lib, name)(*args), name)

    def malloc(self, nbytes: int) -> int:
        ptr = c_void_p()
        self.call("cudaMalloc", byref(ptr), nbytes)
        return ptr.value

    def ipc_mem_handle(self, ptr: int) -> bytes:
        handle = IpcHandle()
        self.call("cudaIpcGetMemHandle", byref(handle), ptr)
        return bytes(handle.reserved)

    def open_mem_handle(self, handle: bytes) -> int:
        ptr = c_void_p()
        self.call("cudaIpcOpenMemHandle", byref(ptr), IpcHandle.of(handle), IPC_LAZY_ENABLE_PEER_ACCESS)
        return ptr.value

    def open_event_handle(self, handle: bytes) -> int:
        event = c_void_p()
        self.call("cudaIpcOpenEventHandle", byref(event), IpcHandle.of(handle))
        return event.value

    def event(self, flags: int = 0) -> int:
        event = c_void_p()
        self.call("cudaEventCreateWithFlags", byref(event), flags)
        return event.value

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = c_float()
        self.call("cudaEventElapsedTime", byref(ms), start, end)
        return ms.value

    def stream(self, flags: int = STREAM_NON_BLOCKING) -> int:
        stream = c_void_p()
        self.call("cudaStreamCreateWithFlags", byref(stream), flags)
        return stream.value

    def sm_count(self, device: int = 0) -> int:
        value = c_int()
        self.call("cudaDeviceGetAttribute", byref(value), DEV_ATTR_MULTIPROCESSOR_COUNT, device)
        return value.value

    def end_capture(self, stream: int) -> int:
        graph = c_void_p()
        self.call("cudaStreamEndCapture", stream, byref(graph))
        return graph.value

    def instantiate(self, graph: int) -> int:
        exec_ = c_void_p()
        self.call("cudaGraphInstantiate", byref(exec_), graph, 0)
        return exec_.value

    def node_census(self, graph: int) -> dict[str, int]:
        """Nodes of `graph` by type (NODE_TYPES names), child graphs counted through."""
        count = c_size_t()
        self.call("cudaGraphGetNodes", graph, None, byref(count))
        nodes = (c_void_p * max(count.value, 1))()
        self.call("cudaGraphGetNodes", graph, nodes, byref(count))
        census: dict[str, int] = {}
        for node in nodes[:count.value]:
            kind = c_int()
            self.call("cudaGraphNodeGetType", node, byref(kind))
            if NODE_TYPES.get(kind.value) == "graph":
                child = c_void_p()
                self.call("cudaGraphChildGraphNodeGetGraph", node, byref(child))
                for name, n in self.node_census(child.value).items():
                    census[name] = census.get(name, 0) + n
                continue
            name = NODE_TYPES.get(kind.value, f"type{kind.value}")
            census[name] = census.get(name, 0) + 1
        return census
