"""Deliberately broken implementations, one per failure mode: the harness's proof that its checks can fail.

Each has the implementation signature `impl(a, b, bias, out) -> Tensor` (layout "nn": b is [K, N]) and runs on CPU
and CUDA tensors. Tests assert that each one fails the check made to catch it while torch passes.
"""
from __future__ import annotations

import torch


def fp16_accumulating(a, b, bias, out):
    """Partial products of 256-wide K chunks summed in the input dtype: an 'fp32' kernel accumulating in fp16."""
    acc = torch.zeros(out.shape, dtype=a.dtype, device=a.device)
    for k0 in range(0, a.shape[1], 256):
        acc += (a[:, k0:k0 + 256].float() @ b[k0:k0 + 256].float()).to(a.dtype)
    return out.copy_(acc if bias is None else acc + bias)


def last_row_unwritten(a, b, bias, out):
    """Leaves the last output row as it was (NaN-poisoned in the checks)."""
    out[:-1].copy_(torch.matmul(a[:-1], b))
    return out


def writes_past_the_end(a, b, bias, out):
    """Writes 8 elements past the last output element (into the guard region)."""
    torch.matmul(a, b, out=out)
    m, n = out.shape
    out.as_strided((8,), (1,), out.storage_offset() + (m - 1) * out.stride(0) + n).fill_(0.0)
    return out


def ignores_leading_dimension(a, b, bias, out):
    """Reads A as if it were dense (row stride K), ignoring its real leading dimension."""
    return torch.matmul(a.as_strided(a.shape, (a.shape[1], 1)), b, out=out)


def low_precision(a, b, bias, out):
    """Inputs rounded to bf16 first: ~3e-3 relative error, over the fp16 tolerance."""
    return out.copy_(torch.matmul(a.bfloat16(), b.bfloat16()))


class Nondeterministic:
    """Every other call perturbs one output by one ulp, as an unordered atomic split-K reduction can."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, a, b, bias, out):
        torch.matmul(a, b, out=out)
        self.calls += 1
        if self.calls % 2:
            out.view(torch.int16)[0, 0] += 1
        return out
