"""Loads a torch-free kernel library (the kernel C ABI of csrc/include/cudal2/abi.h) with ctypes.

For what checks a library itself, without the compiled extension: the kernel-family GPU tests, the correctness
harness's fixture kernels (with a caller-provided, guarded workspace), the sanitizer runs and the compile farm's load
check. The extension loads the same libraries from C++ (`cudal2_ops.matmul`, and `cudal2_testing.kernel_timing`,
which times a loaded kernel through it).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch

ABI_VERSION = 1
DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1}
LAYOUT_CODES = {"nn": 0, "nt": 1}
STATUS_NAMES = {0: "ok", 1: "unsupported", 2: "workspace too small", 3: "launch failed", 4: "bad argument"}


class Problem(ctypes.Structure):
    """Mirror of `cudal2_problem`."""

    _fields_ = [("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
                ("a", ctypes.c_void_p), ("lda", ctypes.c_int64),
                ("b", ctypes.c_void_p), ("ldb", ctypes.c_int64),
                ("d", ctypes.c_void_p), ("ldd", ctypes.c_int64),
                ("bias", ctypes.c_void_p),
                ("dtype", ctypes.c_int32), ("layout", ctypes.c_int32),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
                ("stream", ctypes.c_void_p), ("sm_count", ctypes.c_int32),
                ("splits", ctypes.c_int32), ("swizzle", ctypes.c_int32), ("raster", ctypes.c_int32)]


_STATUS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Problem))
_SIZE_FN = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.POINTER(Problem))


class KernelDesc(ctypes.Structure):
    """Mirror of `cudal2_kernel`."""

    _fields_ = [("abi_version", ctypes.c_int32), ("name", ctypes.c_char_p), ("family", ctypes.c_char_p),
                ("sm_min", ctypes.c_int32), ("sm_max", ctypes.c_int32), ("dtype", ctypes.c_int32),
                ("layout", ctypes.c_int32), ("has_bias", ctypes.c_int32),
                ("can_implement", _STATUS_FN), ("workspace_size", _SIZE_FN), ("launch", _STATUS_FN)]


class KernelError(RuntimeError):
    """A kernel refused a problem or failed to launch."""


@dataclass
class Kernel:
    """One kernel of a loaded library."""

    name: str
    family: str
    sm_min: int
    sm_max: int
    dtype: torch.dtype
    layout: str
    has_bias: bool
    _desc: KernelDesc

    def problem(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None = None,
                splits: int = 0, swizzle: int = 0, raster: int = 0,
                workspace: torch.Tensor | None = None) -> Problem:
        """The descriptor for out = a @ op(b) (+ bias); a is [M, K], b is [K, N] (nn) or [N, K] (nt)."""
        m, k = a.shape
        n = b.shape[1] if self.layout == "nn" else b.shape[0]
        for name, t in (("a", a), ("b", b), ("out", out)):
            if t.stride(-1) != 1:
                raise ValueError(f"{name} must have unit stride in its last dimension, got strides {t.stride()}")
        props = torch.cuda.get_device_properties(a.device)
        return Problem(m=m, n=n, k=k, a=a.data_ptr(), lda=a.stride(0), b=b.data_ptr(), ldb=b.stride(0),
                       d=out.data_ptr(), ldd=out.stride(0), bias=bias.data_ptr() if bias is not None else None,
                       dtype=DTYPE_CODES[a.dtype], layout=LAYOUT_CODES[self.layout],
                       workspace=workspace.data_ptr() if workspace is not None else None,
                       workspace_bytes=workspace.numel() if workspace is not None else 0,
                       stream=torch.cuda.current_stream(a.device).cuda_stream, sm_count=props.multi_processor_count,
                       splits=splits, swizzle=swizzle, raster=raster)

    def can_implement(self, p: Problem) -> bool:
        """Whether the kernel accepts the problem."""
        return self._desc.can_implement(ctypes.byref(p)) == 0

    def workspace_size(self, p: Problem) -> int:
        """Workspace bytes the kernel needs for the problem."""
        return int(self._desc.workspace_size(ctypes.byref(p)))

    def launch(self, p: Problem) -> int:
        """Enqueues the kernel for a prepared problem; returns the ABI status (0 = ok)."""
        return int(self._desc.launch(ctypes.byref(p)))

    def run(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
            out: torch.Tensor | None = None, splits: int = 0, swizzle: int = 0, raster: int = 0) -> torch.Tensor:
        """Runs the kernel on the current stream and returns out [M, N] (allocated when not given)."""
        if a.dtype != self.dtype:
            raise ValueError(f"kernel {self.name} is for {self.dtype}, got {a.dtype}")
        n = b.shape[1] if self.layout == "nn" else b.shape[0]
        if out is None:
            out = torch.empty((a.shape[0], n), dtype=a.dtype, device=a.device)
        p = self.problem(a, b, out, bias, splits, swizzle, raster)
        ws_bytes = self.workspace_size(p)
        workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=a.device) if ws_bytes else None
        p = self.problem(a, b, out, bias, splits, swizzle, raster, workspace)
        status = self.launch(p)
        if status != 0:
            raise KernelError(f"kernel {self.name} on M={p.m} N={p.n} K={p.k}: {STATUS_NAMES.get(status, status)}")
        return out


class KernelLibrary:
    """A loaded kernel library: `lib.kernels` maps name -> Kernel."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        index = self._lib.cudal2_kernel_library
        index.restype = ctypes.POINTER(ctypes.POINTER(KernelDesc))
        index.argtypes = [ctypes.POINTER(ctypes.c_int)]
        archs = self._lib.cudal2_kernel_library_archs
        archs.restype = ctypes.c_char_p
        self.archs: list[str] = [a for a in archs().decode().split(";") if a]
        count = ctypes.c_int(0)
        table = index(ctypes.byref(count))
        self.kernels: dict[str, Kernel] = {}
        for i in range(count.value):
            desc = table[i].contents
            if desc.abi_version != ABI_VERSION:
                raise RuntimeError(f"{self.path}: kernel ABI {desc.abi_version}, expected {ABI_VERSION}")
            dtype = next(t for t, code in DTYPE_CODES.items() if code == desc.dtype)
            layout = next(name for name, code in LAYOUT_CODES.items() if code == desc.layout)
            self.kernels[desc.name.decode()] = Kernel(desc.name.decode(), desc.family.decode(), desc.sm_min,
                                                      desc.sm_max, dtype, layout, bool(desc.has_bias), desc)

    def runnable_on(self, device: torch.device | int | None = None) -> dict[str, Kernel]:
        """The kernels whose binaries run on `device` (compute capability within range and compiled for it)."""
        major, minor = torch.cuda.get_device_capability(device)
        cc = major * 10 + minor
        compiled = {int(a.rstrip("a")) for a in self.archs}
        ok = any(c // 10 == major and c <= cc for c in compiled)
        return {n: k for n, k in self.kernels.items() if ok and k.sm_min <= cc <= k.sm_max}
