"""The environment header of a results file: GPU, clocks, driver and library versions, git commit, command line,
and the peak GEMM throughput and memory bandwidth measured once on this GPU (for the roofline)."""
from __future__ import annotations

import ctypes
import datetime
import hashlib
import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from cudal2_testing.measure import timing
from cudal2_ops.tables import DeviceFacts, gpu_slug, load_table_for

REPO = Path(__file__).resolve().parents[2]
SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "power.limit", "memory.total", "pci.bus_id", "uuid")  # uuid: which card (tuned on it, or another)


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def nvidia_smi(index: int) -> dict:
    """Selected nvidia-smi fields of GPU `index` (empty when nvidia-smi is unavailable)."""
    out = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"])
    if not out:
        return {}
    return dict(zip(SMI_FIELDS, (v.strip() for v in out.splitlines()[0].split(","))))


def cublas_version() -> str | None:
    """cublasLtGetVersion() of the cuBLASLt this process loaded (torch's), as "major.minor.patch"."""
    for lib in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        try:
            fn = ctypes.CDLL(lib).cublasLtGetVersion
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_size_t
        v = fn()
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return None


# The cudal2 environment variables that change what a benchmark measures (README "Environment variables").
BEHAVIOUR_VARIABLES = ("CUDAL2_DISABLE_KERNELS", "CUDAL2_DISABLE_PDL", "CUDAL2_DISABLE_INDUCTOR_LOWERING", "CUDAL2_TABLE",
                       "CUDAL2_TUNE", "CUDAL2_TUNE_FILE", "CUDAL2_KERNEL_LIBS", "CUDAL2_CONFIRM_NEAR_TIES")


def cudal2_environment() -> dict[str, str]:
    """The behaviour-changing CUDAL2_* variables set in this process (name -> value)."""
    return {name: os.environ[name] for name in BEHAVIOUR_VARIABLES if name in os.environ}


def pdl_disabled() -> bool:
    """Whether CUDAL2_DISABLE_PDL turns programmatic dependent launch of the sm90 kernels off in this process."""
    return os.environ.get("CUDAL2_DISABLE_PDL", "0") not in ("", "0")


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cutlass_version() -> str | None:
    """The version of the installed CUTLASS headers (the `nvidia-cutlass` wheel the kernel build compiles against
    unless CUTLASS_DIR points elsewhere); None when the wheel is not installed."""
    return _dist_version("nvidia-cutlass")


def git_commit() -> str | None:
    """CUDAL2_COMMIT when set (a copied tree on the GPU machine, whose .git may be stale or absent), else HEAD of the
    checkout with "+dirty" when tracked files differ, else None."""
    if os.environ.get("CUDAL2_COMMIT"):
        return os.environ["CUDAL2_COMMIT"]
    head = _run(["git", "rev-parse", "HEAD"])
    if head is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return head + ("+dirty" if dirty else "")


def dispatch_table(device: int) -> dict | None:
    """The table cudal2's dispatcher loads on `device`: its path, its number of entries and a digest of them (a user's
    tuned overlay included), or None when the dispatcher runs without one (none found, or one that does not fit this
    GPU: the warning saying why is the dispatcher's own, not repeated here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        table = load_table_for(DeviceFacts.of(device))
    if table is None:
        return None
    digest = hashlib.sha256(json.dumps(table.entries, sort_keys=True).encode()).hexdigest()[:16]
    return {"path": str(table.path), "entries": len(table.entries), "entries_sha256": digest,
            "tuned_overlay": table.header.get("tuned_overlay")}


def _best_us(call, warmup_s: float = 0.5) -> float:
    """Fastest per-call replay time (us) of `call` after `warmup_s` of back-to-back calls (clocks ramped up)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        for _ in range(8):
            call(0)
        torch.cuda.synchronize()
    return timing.kernel_mode(call, 1, timing.estimate_ms(call, 1), target_ms=50.0)["min_us"]


def measure_roofline() -> dict:
    """Peak fp16 GEMM throughput (torch.matmul 8192^3) and read bandwidth (sum over 4 GiB), each the best replay
    after a warm-up. Single large shapes can beat this peak slightly (>100 % of roofline)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    out = torch.empty(n, n, device="cuda", dtype=torch.float16)
    t_gemm = _best_us(lambda i, a=a, b=b, out=out: torch.matmul(a, b, out=out))
    del a, b, out
    x = torch.ones(2**30, device="cuda", dtype=torch.float32)
    acc = torch.empty((), device="cuda", dtype=torch.float32)
    t_read = _best_us(lambda i, x=x: torch.sum(x, dim=0, out=acc))
    nbytes = x.numel() * x.element_size()
    del x
    torch.cuda.empty_cache()
    return {"peak_tflops": 2 * n**3 / t_gemm / 1e6, "peak_source": f"torch.matmul fp16 {n}^3, best replay",
            "bandwidth_gbs": nbytes / t_read / 1e3, "bandwidth_source": "torch.sum over 4 GiB fp32 (read), best replay"}


def header(argv: list[str]) -> dict:
    """The environment header (without the roofline and wall time, which the run adds)."""
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    package = _dist_version("cudal2", "cudal2-ops", "cudal2_ops")
    if package is None:
        try:
            import cudal2_ops
            package = getattr(cudal2_ops, "__version__", None)
        except ImportError:
            pass
    return {
        "gpu": props.name, "gpu_slug": gpu_slug(props.name), "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None), "memory_bytes": props.total_memory, "capability": f"{props.major}.{props.minor}",
        "nvidia_smi": nvidia_smi(idx), "cuda": torch.version.cuda, "torch": torch.__version__,
        "torch_compiled_cuda": torch._C._cuda_getCompiledVersion(), "cublas": cublas_version(),
        "cutlass": cutlass_version(), "package": package,
        "commit": git_commit(), "pdl_disabled": pdl_disabled(), "cudal2_environment": cudal2_environment(),
        "table": dispatch_table(idx),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable.rsplit("/", 1)[-1], "-m", "benchmarks.grid", *argv]),
    }
