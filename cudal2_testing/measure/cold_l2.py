"""Cold-L2 input sets: how many operand sets of one GEMM problem to rotate over so that no call finds its operands in
the L2 left by the previous call (benchmarks.decode_bandwidth and search.sweep)."""
from __future__ import annotations

import torch

COLD_FACTOR = 4                  # input sets total more than this many L2 sizes
MAX_SETS = 4096                  # timing.kernel_mode's cap on calls per replay with several sets
DEFAULT_L2_BYTES = 64 * 2**20    # when torch does not report the L2 size


def bytes_per_call(m: int, n: int, k: int, element_bytes: int = 2) -> int:
    """Bytes one call must move at least: read A [M, K] and W [N, K], write D [M, N]."""
    return (m * k + n * k + m * n) * element_bytes


def cold_set_count(nbytes: int, l2_bytes: int, factor: int = COLD_FACTOR, cap: int = MAX_SETS) -> int:
    """Input sets of `nbytes` each whose total exceeds `factor` x the L2 (at least 2, at most `cap`)."""
    return max(2, min(cap, factor * l2_bytes // nbytes + 1))


def l2_bytes() -> int:
    """The current device's L2 size as torch reports it, else DEFAULT_L2_BYTES."""
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or DEFAULT_L2_BYTES
