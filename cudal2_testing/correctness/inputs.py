"""Test inputs: seeded random and exact 0/1 operands, and guarded views carved out of larger buffers.

A `GuardedTensor` is a strided view (any leading dimension, any element offset, so 16-byte alignment can be broken
on purpose) inside a byte buffer whose every other byte holds a seeded pseudo-random sentinel pattern: guard regions
of at least 64 KiB on both sides, and the padding between rows. After a call, `changed_outside()` reports any byte
the callee wrote outside the view.
"""
from __future__ import annotations

import math

import torch

GUARD_BYTES = 64 * 1024
# Exact-integer check: expected number of 1*1 products per output (> 2048, where fp16 accumulation starts rounding).
EXACT_TARGET_SUM = 2600
# Density of ones when K is too small for any sum to pass EXACT_TARGET_SUM (varied outputs, not all equal to K).
EXACT_SMALL_K_DENSITY = 0.5


def generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A torch generator on `device` seeded with `seed`."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def b_shape(m_n_k: tuple[int, int, int], layout: str) -> tuple[int, int]:
    """Shape of B: [K, N] for "nn", [N, K] for "nt"."""
    _, n, k = m_n_k
    return (k, n) if layout == "nn" else (n, k)


def random_inputs(shape: tuple[int, int, int], layout: str, dtype: torch.dtype, with_bias: bool, seed: int,
                  device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Contiguous randn (a, b, bias) for problem (M, N, K), reproducible from `seed`."""
    m, n, k = shape
    g = generator(seed, device)
    a = torch.randn((m, k), generator=g, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn(b_shape(shape, layout), generator=g, device=device, dtype=torch.float32).to(dtype)
    bias = torch.randn((n,), generator=g, device=device, dtype=torch.float32).to(dtype) if with_bias else None
    return a, b, bias


def exact_density(k: int) -> float:
    """Density of ones in A and B so that an output's expected sum is EXACT_TARGET_SUM (when K allows)."""
    p = math.sqrt(EXACT_TARGET_SUM / max(k, 1))
    return p if p <= 1.0 else EXACT_SMALL_K_DENSITY


def exact_inputs(shape: tuple[int, int, int], layout: str, dtype: torch.dtype, with_bias: bool, seed: int,
                 device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """0/1 operands whose products sum past 2048 when K >= 4096: exact in fp32, not in fp16.

    The bias, when asked for, is zeros: the bias path runs, but the expected value stays the once-rounded sum.
    (A nonzero bias would also demand a single rounding of sum + bias, which torch's own F.linear/addmm does not
    give on every path, e.g. M=6, N=10 on an H200; bias accuracy is the random check's job.)
    """
    m, n, k = shape
    p = exact_density(k)
    g = generator(seed, device)
    a = (torch.rand((m, k), generator=g, device=device) < p).to(dtype)
    b = (torch.rand(b_shape(shape, layout), generator=g, device=device) < p).to(dtype)
    bias = torch.zeros((n,), dtype=dtype, device=device) if with_bias else None
    return a, b, bias


# Small-K exact check: expected sum per output. Partial sums pass 2048 (where fp16 accumulation starts rounding)
# within the first K elements at any K, and the largest possible sum (4x this) stays below fp16's 65504.
INTEGER_TARGET_SUM = 8000
INTEGER_MAX_VALUE = 64   # operands are integers in [1, v], v <= 64: exact in fp16 and bf16, products exact in fp32


def integer_value_bound(k: int) -> int | None:
    """v of `integer_inputs` for depth K: the expected sum K * ((v + 1) / 2)^2 is about INTEGER_TARGET_SUM; None
    when K is so deep that even all-ones operands would overflow fp16 (the 0/1 exact check covers that depth)."""
    if k * 1 > 4 * INTEGER_TARGET_SUM:
        return None
    return max(1, min(INTEGER_MAX_VALUE, int(2 * math.sqrt(INTEGER_TARGET_SUM / max(k, 1)) - 1)))


def integer_inputs(shape: tuple[int, int, int], layout: str, dtype: torch.dtype, with_bias: bool, seed: int,
                   device: torch.device | str, v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Operands of uniform integers in [1, v] (see `integer_value_bound`): every sum is exact in fp32 and the
    partial sums pass 2048 early, so fp16 or bf16 accumulation rounds at small K too. Bias, when asked for, is
    zeros (as in `exact_inputs`)."""
    m, n, k = shape
    g = generator(seed, device)
    a = torch.randint(1, v + 1, (m, k), generator=g, device=device).to(dtype)
    b = torch.randint(1, v + 1, b_shape(shape, layout), generator=g, device=device).to(dtype)
    bias = torch.zeros((n,), dtype=dtype, device=device) if with_bias else None
    return a, b, bias


def exact_expected(a: torch.Tensor, b: torch.Tensor, layout: str, bias: torch.Tensor | None) -> torch.Tensor:
    """dtype(round(exact sum)) of integer operands: the sum in float64 (exact for these sizes), rounded once."""
    bd = b.double() if layout == "nn" else b.double().t()
    exact = a.double() @ bd
    if bias is not None:
        exact += bias.double()
    return exact.to(a.dtype)


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise equality of two half-precision tensors (NaN payloads included)."""
    return x.shape == y.shape and torch.equal(x.contiguous().view(torch.int16), y.contiguous().view(torch.int16))


class GuardedTensor:
    """A 1-D or 2-D view at an element offset (and with row stride `ld`) inside a sentinel-filled byte buffer."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, *,
                 ld: int | None = None, offset: int = 0, guard_bytes: int = GUARD_BYTES, seed: int = 0) -> None:
        if len(shape) not in (1, 2):
            raise ValueError(f"GuardedTensor holds 1-D or 2-D views, got shape {shape}")
        esize = torch.empty((), dtype=dtype).element_size()
        if guard_bytes % esize or guard_bytes < 0 or offset < 0:
            raise ValueError(f"guard_bytes ({guard_bytes}) must be a non-negative multiple of {esize}, offset >= 0")
        cols = shape[-1]
        rows = shape[0] if len(shape) == 2 else 1
        self.ld = cols if ld is None else ld
        if self.ld < cols:
            raise ValueError(f"ld {self.ld} < row length {cols}")
        span = (rows - 1) * self.ld + cols if rows and cols else 0
        self.dtype = dtype
        self.shape = tuple(shape)
        self.strides = (self.ld, 1) if len(shape) == 2 else (1,)
        self.first = guard_bytes // esize + offset     # element index of the view's first element
        self.span = span                               # elements from the first to one past the last
        total_elems = self.first + span + guard_bytes // esize
        self.buffer = torch.randint(0, 256, (total_elems * esize,), generator=generator(seed, device),
                                    device=device, dtype=torch.uint8)
        self.view = self._view_of(self.buffer)
        self._snapshot: torch.Tensor | None = None

    def _view_of(self, buffer: torch.Tensor) -> torch.Tensor:
        return buffer.view(self.dtype).as_strided(self.shape, self.strides, self.first)

    def fill(self, values: torch.Tensor | float) -> GuardedTensor:
        """Writes the view's contents (a tensor of its shape, or a scalar such as NaN) and snapshots the buffer."""
        if isinstance(values, torch.Tensor):
            self.view.copy_(values)
        else:
            self.view.fill_(values)
        self._snapshot = self.buffer.clone()
        return self

    def changed_outside(self) -> str | None:
        """None when no byte outside the view changed since `fill`, else where the first change is."""
        if self._snapshot is None:
            raise RuntimeError("fill() the GuardedTensor before checking it")
        now, then = self.buffer.clone(), self._snapshot.clone()
        self._view_of(now).zero_()
        self._view_of(then).zero_()
        changed = (now != then).nonzero().flatten()
        if changed.numel() == 0:
            return None
        esize = self.view.element_size()
        start, end = self.first * esize, (self.first + self.span) * esize
        first_byte = int(changed[0])
        where = ("before the view" if first_byte < start else "after the view" if first_byte >= end
                 else "in the padding between rows")
        return (f"{changed.numel()} guard bytes changed; first at byte {first_byte - start:+d} relative to the "
                f"view start ({where})")

    def changed_anywhere(self) -> str | None:
        """None when no byte of the buffer (view included) changed since `fill` (for inputs, which must stay)."""
        if self._snapshot is None:
            raise RuntimeError("fill() the GuardedTensor before checking it")
        outside = self.changed_outside()
        if outside is not None:
            return outside
        if not torch.equal(self.buffer, self._snapshot):
            return "the input itself was modified"
        return None
