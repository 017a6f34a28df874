#!/usr/bin/env bash
# On an sm90 GPU: runs the sm90_tma_ws GPU tests against a built kernel library, times the family's kernels
# against cuBLAS (torch.matmul / F.linear) at 4096^3 and 8192^3 (kernel-only: CUDA graph of back-to-back calls,
# CUDA events, median of 5 replays), and runs compute-sanitizer memcheck on a few small problems.
#
#   scripts/gpu_family_sm90.sh [build/sm90_tma_ws/libk.so]     (logs go to $OUT, default /tmp/cudal2_sm90)
set -u
export CUDAL2_KERNEL_LIB="$(realpath "${1:-build/sm90_tma_ws/libk.so}")"
export PYTHONUNBUFFERED=1
LOG_DIR="${OUT:-/tmp/cudal2_sm90}"
mkdir -p "$LOG_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$LOG_DIR/env.txt"

echo "== pytest"
timeout "${PYTEST_TIMEOUT:-110}" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_sm90_tma_ws.py \
  > "$LOG_DIR/pytest.log" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR)" "$LOG_DIR/pytest.log" | cut -c1-220 | head -n 30
tail -n 3 "$LOG_DIR/pytest.log"

echo "== timing"
timeout "${BENCH_TIMEOUT:-60}" python3 - <<'EOF' 2>&1 | tee "$LOG_DIR/bench.txt"
import os, statistics
import torch
import torch.nn.functional as F
from cudal2_ops.kernel_library import KernelLibrary

lib = KernelLibrary(os.environ["CUDAL2_KERNEL_LIB"])
kernels = [k for k in lib.runnable_on().values() if k.family == "sm90_tma_ws"]
KNOBS = ({}, {"swizzle": 2}, {"swizzle": 4}, {"raster": 1})

def graph_ms(fn, reps=20):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); graph.replay(); end.record(); end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)

print(f"{'size':>5} {'dt':>4} {'lay':>3} {'cublas_TF':>9} {'ours_TF':>8} {'ratio':>6}  best")
for size in (4096, 8192):
    flop = 2 * size ** 3
    for dtype in (torch.float16, torch.bfloat16):
        for layout in ("nn", "nt"):
            if not any(k.dtype == dtype and k.layout == layout for k in kernels):
                continue
            a = torch.randn(size, size, device="cuda", dtype=dtype)
            b = torch.randn(size, size, device="cuda", dtype=dtype)
            out = torch.empty(size, size, device="cuda", dtype=dtype)
            ref = a @ b if layout == "nn" else F.linear(a, b)
            t_ref = graph_ms(lambda: torch.matmul(a, b, out=out) if layout == "nn" else F.linear(a, b))
            per_kernel = []
            for k in kernels:
                if k.dtype != dtype or k.layout != layout:
                    continue
                times = [(graph_ms(lambda: k.run(a, b, out=out, **knobs)), k.name, knobs) for knobs in KNOBS]
                per_kernel.append(min(times, key=lambda x: x[0]))
            t, name, knobs = min(per_kernel, key=lambda x: x[0])
            others = " ".join(f"{n.split('_')[5]}/{n.split('_')[-1][:2]}={flop / tk / 1e9:.0f}"
                              for tk, n, _ in per_kernel)
            k = lib.kernels[name]
            err = ((k.run(a, b, **knobs).float() - ref.float()).norm() / ref.float().norm()).item()
            label = "fp16" if dtype == torch.float16 else "bf16"
            print(f"{size:>5} {label:>4} {layout:>3} {flop / t_ref / 1e9:9.1f} {flop / t / 1e9:8.1f} "
                  f"{t_ref / t:6.3f}  {name.replace('sm90_tma_ws_', '')} {knobs} err={err:.1e} | {others}")
EOF

echo "== compute-sanitizer memcheck"
timeout "${SANITIZER_TIMEOUT:-60}" compute-sanitizer --tool memcheck --print-limit 5 python3 - <<'EOF' \
  > "$LOG_DIR/memcheck.log" 2>&1
import os
import torch
from cudal2_ops.kernel_library import KernelLibrary

lib = KernelLibrary(os.environ["CUDAL2_KERNEL_LIB"])
for k in lib.runnable_on().values():
    if k.family != "sm90_tma_ws":
        continue
    for m, n, k_ in ((1, 8, 8), (65, 1000, 520), (300, 264, 4104)):
        a = torch.randn(m, k_, device="cuda").to(k.dtype)
        b = torch.randn(*((k_, n) if k.layout == "nn" else (n, k_)), device="cuda").to(k.dtype)
        bias = torch.randn(n, device="cuda").to(k.dtype)
        k.run(a, b, bias, splits=3)
torch.cuda.synchronize()
print("memcheck run done")
EOF
echo "memcheck exit $?"
grep -E "ERROR SUMMARY|memcheck run done|Invalid" "$LOG_DIR/memcheck.log" | head -n 8
